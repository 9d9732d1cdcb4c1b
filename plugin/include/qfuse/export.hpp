#pragma once
// QFUSE_API marks what libqfuse exports; everything else in the library is
// hidden (built with -fvisibility=hidden).

#if defined(_WIN32)
#define QFUSE_API
#else
#define QFUSE_API __attribute__((visibility("default")))
#endif
