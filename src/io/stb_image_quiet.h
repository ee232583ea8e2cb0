#pragma once
// <stb/stb_image.h> with the warnings its own code raises under -Wall -Wextra silenced (third-party
// code; ours keeps every warning). The implementation is compiled once, in image.cpp, which defines
// STB_IMAGE_IMPLEMENTATION and the STBI_ONLY_* formats before including this; the tests include it
// to read our PNGs back with a decoder independent of libpng.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
