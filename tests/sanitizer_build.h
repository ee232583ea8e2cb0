// LINGBOT_ASAN_BUILD: 1 in a translation unit compiled with AddressSanitizer, by GCC (which defines
// __SANITIZE_ADDRESS__) or clang (which answers __has_feature(address_sanitizer) instead); else 0.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define LINGBOT_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LINGBOT_ASAN_BUILD 1
#endif
#endif
#ifndef LINGBOT_ASAN_BUILD
#define LINGBOT_ASAN_BUILD 0
#endif
