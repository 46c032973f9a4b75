// libstdc++ functions that g++ 11 and newer call from inline code but that older libstdc++
// releases lack (GLIBCXX_3.4.26 and 3.4.29). The library is linked with -Wl,--wrap=<symbol> for each of them
// (build_support/glibc_floor.py), so every call lands here instead, and the library loads with
// the libstdc++ of the oldest system TensorFlow's wheel supports. Each does what libstdc++'s own
// does.
#include <ios>
#include <new>
#include <sstream>

extern "C" [[noreturn]] void __wrap__ZSt28__throw_bad_array_new_lengthv() {
  throw std::bad_array_new_length();
}

// std::stringstream's default constructor (GLIBCXX_3.4.26; XLA's FFI headers use it for their
// diagnostics): the one that takes an open mode, which older releases have, with the default's.
extern "C" void __wrap__ZNSt7__cxx1118basic_stringstreamIcSt11char_traitsIcESaIcEEC1Ev(
    std::stringstream* self) {
  new (self) std::stringstream(std::ios_base::in | std::ios_base::out);
}
