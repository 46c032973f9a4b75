// libstdc++ functions that g++ 11 and newer call from inline code but that older libstdc++
// releases lack (GLIBCXX_3.4.29). The library is linked with -Wl,--wrap=<symbol> for each of them
// (build_support/glibc_floor.py), so every call lands here instead, and the library loads with
// the libstdc++ of the oldest system TensorFlow's wheel supports. Each does what libstdc++'s own
// does.
#include <new>

extern "C" [[noreturn]] void __wrap__ZSt28__throw_bad_array_new_lengthv() {
  throw std::bad_array_new_length();
}
