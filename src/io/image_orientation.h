#pragma once
// Where a picture's orientation is stored, read as Pillow's Image.getexif() reads it for
// ImageOps.exif_transpose (upstream's loader), inside io/image.cpp:
//  * the EXIF Orientation tag (0x0112): JPEG's first APP1 "Exif" segment; PNG's eXIf chunk, or else
//    the hex EXIF of a "Raw profile type exif" text chunk (ImageMagick writes a photo's EXIF there);
//  * only when that EXIF has no Orientation tag: the first `tiff:Orientation="N"` (or
//    `<tiff:Orientation>N`) of the XMP packet: PNG's "XML:com.adobe.xmp" text chunk (macOS Preview
//    writes it), JPEG's APP1 "http://ns.adobe.com/xap/1.0/" segment (Pillow 11 and later; Debian 12's
//    Pillow 9.4 reads it from PNG only).
// Values 1..8 are orientations; any other value leaves the picture as stored, as Pillow does. A
// malformed block, which makes Pillow raise, counts as absent.
#include <cstdint>
#include <span>
#include <string>

namespace lingbot::io {

// The orientation of a JPEG file (1 = as stored).
int jpeg_file_orientation(std::span<const uint8_t> file_bytes);

// What a PNG file's chunk table says besides the pixels: its orientation, and a chunk that claims
// more bytes than the file has (a message; "" = none). `error_in_header`: that chunk comes before
// the image data and is not IDAT, so reading the header alone (libpng's png_read_info, which loads
// such chunks whole) meets it; a file cut inside its image data has a readable header.
struct PngChunkFacts {
  int orientation = 1;
  std::string chunk_error;
  bool error_in_header = false;
};
PngChunkFacts png_chunk_facts(std::span<const uint8_t> file_bytes);

}  // namespace lingbot::io
