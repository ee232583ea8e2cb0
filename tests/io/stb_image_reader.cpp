// The tests' own stb_image, an independent reader of the PNGs we write (libpng writes them).
// lingbot_io compiles its copy with internal linkage (STB_IMAGE_STATIC), so this one does not clash;
// it stays out of unity bundles (tests/CMakeLists.txt), where the implementation macro would reach
// the other test files' includes.
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_FAILURE_USERMSG
#include "io/stb_image_quiet.h"
