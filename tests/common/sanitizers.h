// Which sanitizer a test binary is built with (ZIPCCL_SANITIZE), for the few tests that cannot run
// under one: 1 or 0, from gcc's macros or clang's __has_feature.
#pragma once

#if defined(__has_feature)
#define ZIP_TEST_HAS_FEATURE(x) __has_feature(x)
#else
#define ZIP_TEST_HAS_FEATURE(x) 0
#endif

#if defined(__SANITIZE_ADDRESS__) || ZIP_TEST_HAS_FEATURE(address_sanitizer)
#define ZIP_TEST_ASAN 1
#else
#define ZIP_TEST_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__) || ZIP_TEST_HAS_FEATURE(thread_sanitizer)
#define ZIP_TEST_TSAN 1
#else
#define ZIP_TEST_TSAN 0
#endif
