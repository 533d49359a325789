// StepBreakdown: what the decode steps' time went to, read from a trace of them (core/trace.h:
// the spans the forward pass and the tiered store record on the compute thread). Each phase is
// its spans less the reads, waits and decoding inside them, which count apart (io_wait, decode).
// The read-ahead thread's own reads overlap the compute thread and are not part of a step's time;
// read_ahead_ms says how long they took, for comparison. A batch whose rows select and attend side
// by side (LlamaForward::select_and_attend_across_rows) records each phase as one span on the
// compute thread: the reads and waits of the rows that other threads ran count in the phase.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "core/trace.h"

namespace leoam {

struct StepBreakdown {
  int64_t n_steps = 0;
  // Means over the steps summarized, in milliseconds.
  double step_ms = 0.0;
  double weights_ms = 0.0;    // the projections and the FFN ("qkv", "attn_output", "ffn")
  // The policy's selection and the pipeline's speculation ("select", "speculate next layer").
  double selection_ms = 0.0;
  // Disk reads the compute thread waited for: a gather's own reads ("disk read") and its waits
  // for the read-ahead thread ("wait for read-ahead"), wherever they fall (a layer's append waits
  // for its read-ahead inside "qkv").
  double io_wait_ms = 0.0;
  double decode_ms = 0.0;     // decoding compressed (int8/int4) chunks ("decode chunks")
  double attention_ms = 0.0;  // the rest of "attention"
  double other_ms = 0.0;      // the rest of the step ("decode step" less all of the above)
  double read_ahead_ms = 0.0;  // the read-ahead thread's reads (overlapped)

  // "decode step 12.3 ms (mean of 15): weights 5.1, selection 2.0, I/O wait 3.3, decode 0.0,
  // attention 1.2, other 0.7; read ahead 2.9 alongside"
  std::string to_text() const;
  // {"steps":..,"step_ms":..,"weights_ms":..,"selection_ms":..,"io_wait_ms":..,"decode_ms":..,
  //  "attention_ms":..,"other_ms":..,"read_ahead_ms":..}
  std::string to_json() const;
};

// The breakdown of the decode steps in `trace` ("decode step" spans), the first `skip` of them
// left out (the first step, which reads cold, is reported apart), and at most `count` after them
// (summarize_decode_steps(trace, 0, 1): the first step alone). Zero steps: all zeros.
StepBreakdown summarize_decode_steps(const Trace& trace, int64_t skip = 1,
                                     int64_t count = std::numeric_limits<int64_t>::max());

}  // namespace leoam
