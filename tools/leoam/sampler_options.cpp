#include "sampler_options.h"

#include "cli_common.h"

namespace leoam::cli {

void add_sampler_options(CLI::App& cmd, SamplerOptions& s) {
  cmd.add_option("--temp", s.temperature, "temperature (<= 0: greedy, always the most likely token)")
      ->capture_default_str()
      ->check(number<float>());
  cmd.add_option("--top-k", s.top_k, "keep the K most likely tokens (<= 0: all)")
      ->capture_default_str()
      ->check(number<int>());
  cmd.add_option("--top-p", s.top_p, "keep the most likely tokens up to probability mass P (1: off)")
      ->capture_default_str()
      ->check(in_range(0.0f, 1.0f));
  cmd.add_option("--min-p", s.min_p, "drop tokens less likely than P times the most likely one (0: off)")
      ->capture_default_str()
      ->check(in_range(0.0f, 1.0f));
  cmd.add_option("--repeat-penalty", s.repeat_penalty, "penalize tokens seen in the last --repeat-last-n (1: off)")
      ->capture_default_str()
      ->check(positive<float>());
  cmd.add_option("--repeat-last-n", s.repeat_last_n, "tokens of history the repeat penalty looks at (0: off)")
      ->capture_default_str()
      ->check(non_negative<int>());
}

}  // namespace leoam::cli
