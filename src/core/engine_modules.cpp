#include "core/engine_modules.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <system_error>
#include <vector>

namespace freight::detail {

namespace fs = std::filesystem;

fs::path engine_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&engine_library_dir), &info) == 0 ||
      info.dli_fname == nullptr || info.dli_fname[0] == '\0')
    return {};
  // dli_fname is the name the loader was given: a relative name when the program itself was run
  // by a relative path and this code is linked into it, so it is made absolute here.
  std::error_code ec;
  const fs::path file = fs::weakly_canonical(info.dli_fname, ec);
  return (ec ? fs::path(info.dli_fname).lexically_normal() : file).parent_path();
}

void* open_engine_module(const std::string& file, std::string* failures) {
  std::vector<std::string> tries;
  const fs::path dir = engine_library_dir();
  if (!dir.empty()) tries.push_back((dir / file).string());
  tries.push_back(file);
  for (const std::string& path : tries) {
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    // The loader's message usually starts with the path already.
    const char* error = dlerror();  // (a second call would return nullptr)
    const std::string why = error ? error : "unknown error";
    if (failures)
      *failures += why.rfind(path, 0) == 0 ? "\n  " + why : fmt::format("\n  {}: {}", path, why);
  }
  return nullptr;
}

}  // namespace freight::detail
