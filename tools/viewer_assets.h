#pragma once
// The viewer page's files (web/viewer/ and three.js from web/node_modules), embedded into the CLI
// at build time by cmake/embed_assets.cmake; the server serves them from memory.
#include <span>
#include <string_view>

namespace lingbot::cli {

struct WebAsset {
  std::string_view url;   // absolute URL path, e.g. "/viewer.js"
  std::string_view mime;  // Content-Type
  std::string_view data;  // the file's bytes (static storage)
};

std::span<const WebAsset> web_assets();
// Why the page cannot work in this build ("" when every file was embedded): three.js is taken from
// web/node_modules, which `npm ci` in web/ installs before the build.
std::string_view web_assets_missing();

}  // namespace lingbot::cli
