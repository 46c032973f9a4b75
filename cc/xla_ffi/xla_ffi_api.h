// XLA's typed FFI API (xla/ffi/api/ffi.h), included as a system header: its own code trips
// warnings (-Wreturn-type, -Wattributes) that are not ours to fix and would bury ours.
#ifndef TF_FBN_OPS_CC_XLA_FFI_XLA_FFI_API_H_
#define TF_FBN_OPS_CC_XLA_FFI_XLA_FFI_API_H_

#pragma GCC system_header

#include "xla/ffi/api/ffi.h"

#endif  // TF_FBN_OPS_CC_XLA_FFI_XLA_FFI_API_H_
