/* User-space stand-in for the kernel types nvrel.h uses (tools/fuzz only). */
#ifndef NVFUZZ_SHIM_LINUX_TYPES_H
#define NVFUZZ_SHIM_LINUX_TYPES_H
#include_next <linux/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
#ifndef ARRAY_SIZE
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#endif
#endif
