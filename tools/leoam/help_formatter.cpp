#include "help_formatter.h"

#include <sstream>
#include <vector>

namespace leoam::cli {

std::string HelpFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
  const std::string left = "  " + make_option_name(opt, is_positional) + make_option_opts(opt);
  const size_t column = get_column_width();
  std::vector<std::string> words;
  std::istringstream in(make_option_desc(opt));
  for (std::string w; in >> w;) words.push_back(w);
  std::string out = left;
  size_t at = left.size();
  if (words.empty()) return out + "\n";
  if (at + 1 >= column) {  // a long name: the description starts on the next line
    out += "\n" + std::string(column, ' ');
    at = column;
  } else {
    out += std::string(column - at, ' ');
    at = column;
  }
  bool line_start = true;
  for (const std::string& w : words) {
    if (!line_start && at + 1 + w.size() > kHelpWidth) {
      out += "\n" + std::string(column, ' ');
      at = column;
      line_start = true;
    }
    if (!line_start) {
      out += ' ';
      ++at;
    }
    out += w;
    at += w.size();
    line_start = false;
  }
  return out + "\n";
}

}  // namespace leoam::cli
