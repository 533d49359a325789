// --help laid out for a terminal: each option's description wrapped at kHelpWidth columns, its
// continuation lines under the description column (CLI11 2.1 prints a description on one line,
// however long).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace leoam::cli {

class HelpFormatter : public CLI::Formatter {
 public:
  static constexpr size_t kHelpWidth = 100;
  std::string make_option(const CLI::Option* opt, bool is_positional) const override;
};

}  // namespace leoam::cli
