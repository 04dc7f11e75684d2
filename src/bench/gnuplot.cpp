// Quoting for gnuplot scripts and data files; see gnuplot.h for what gnuplot would expand.
#include "bench/gnuplot.h"

namespace freight::bench {

namespace {
bool is_control(char c) {
  return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
}
}  // namespace

std::string gnuplot_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '`':  // octal escapes: the character is in the string, not on the command line
        out += "\\140";
        break;
      case '@':
        out += "\\100";
        break;
      default:
        out += is_control(c) ? ' ' : c;
    }
  }
  return out + "\"";
}

std::string gnuplot_path(const std::string& path) {
  if (path.empty() || path[0] == '/' || path.rfind("./", 0) == 0 || path.rfind("../", 0) == 0)
    return path;
  return "./" + path;
}

std::string gnuplot_file(const std::string& path) {
  return gnuplot_string(gnuplot_path(path));
}

bool gnuplot_can_name(std::string_view path) {
  for (char c : path)
    if (is_control(c)) return false;
  return true;
}

std::string gnuplot_data_label(std::string_view text) {
  std::string out = "\"";
  for (char c : text) out += c == '"' ? '\'' : is_control(c) ? ' ' : c;
  return out + "\"";
}

std::string gnuplot_data_word(std::string_view text) {
  std::string out;
  for (char c : text) out += c == ' ' || c == '"' || c == '\'' || is_control(c) ? '_' : c;
  return out.empty() ? "_" : out;
}

std::vector<std::string> gnuplot_command(const std::string& script) {
  return {"gnuplot", gnuplot_path(script)};
}

}  // namespace freight::bench
