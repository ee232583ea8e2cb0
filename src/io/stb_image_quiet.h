#pragma once
// <stb/stb_image.h> with the warnings its own code raises under -Wall -Wextra silenced (third-party
// code; ours keeps every warning). image.cpp defines STB_IMAGE_IMPLEMENTATION, STB_IMAGE_STATIC and
// the STBI_ONLY_* formats before including this (its own copy, internal linkage); the io tests
// compile theirs (tests/io/stb_image_reader.cpp) to read our PNGs back independently of libpng.
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
