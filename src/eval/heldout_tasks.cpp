// The held-out retrieval tasks (heldout_tasks.h). Each has a filler of its own, dense with what
// the development filler never has (digits, dates, speakers' names, code), a needle whose words
// and answer form differ from the development tasks' (no "magic number", no "pass key"), and a
// question in its own form (Q/A, a log look-up, a dialogue turn, a code comment). As there, the
// question's last words repeat the needle's words before the answer, so that a model that
// retrieves by matching the text before the answer can find it; the names the needle is keyed on
// never occur in the filler. The answer follows "is:" as in niah: leoam-byte-4l's trained layers
// outvote its copy after most other words ("set at", "=", "number"), even with full attention,
// and in number-dense filler its own guess of the first digit sometimes outvotes the copy too
// (docs/evaluation.md#held-out-sets): a policy is judged against full's answers.
#include "eval/heldout_tasks.h"

#include <array>
#include <cstdio>
#include <string>

namespace leoam::eval {
namespace {

template <size_t N>
std::string_view pick(std::mt19937_64& rng, const std::array<std::string_view, N>& words) {
  return words[static_cast<size_t>(draw(rng, 0, static_cast<int64_t>(N) - 1))];
}

std::string digits(std::mt19937_64& rng, int n) {
  std::string s = std::to_string(draw(rng, 1, 9));
  for (int i = 1; i < n; ++i) s.push_back(static_cast<char>('0' + draw(rng, 0, 9)));
  return s;
}

std::string two_digits(int64_t v) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%02d", static_cast<int>(v));
  return buf;
}

void new_line(std::string* text) {
  if (!text->empty()) text->push_back('\n');
}

// --- ledger: a ledger of days, places, goods and amounts; one account's float ---

constexpr std::array<std::string_view, 7> kDays = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
constexpr std::array<std::string_view, 12> kTowns = {"Harrow", "Dover", "Leeds", "York",  "Bath",  "Ely",
                                                     "Hull",   "Derby", "Wells", "Ripon", "Truro", "Selby"};
constexpr std::array<std::string_view, 10> kGoods = {"crates of nails", "sacks of flour", "barrels of oil",
                                                     "bolts of cloth",  "casks of ale",   "bales of wool",
                                                     "boxes of soap",   "tins of paint",  "coils of rope",
                                                     "loads of coal"};
constexpr std::array<std::string_view, 24> kAccounts = {
    "Ashgrove", "Birchmoor", "Coldharbour", "Dunmere",  "Elmstead",  "Foxley",   "Greyfriars", "Hollins",
    "Ironbridge", "Kingsmead", "Larkhill",  "Millbrook", "Northcote", "Oakridge", "Pinehurst",  "Redcliffe",
    "Saltmarsh", "Thornbury", "Underwood", "Westbury",  "Yarrowby",  "Brackenfield", "Cranmore", "Fenwick"};

void append_ledger(std::mt19937_64& rng, int64_t n_lines, std::string* text) {
  for (int64_t i = 0; i < n_lines; ++i) {
    new_line(text);
    *text += std::string(pick(rng, kDays)) + " " + std::to_string(draw(rng, 1, 28)) + " " +
             std::string(pick(rng, kMonths)) + ", " + std::string(pick(rng, kTowns)) + " depot: " +
             std::to_string(draw(rng, 2, 99)) + " " + std::string(pick(rng, kGoods)) + ", " +
             std::to_string(draw(rng, 10, 9999)) + "." + two_digits(draw(rng, 0, 99)) + " paid.";
  }
}

TaskText ledger_text(std::mt19937_64& rng) {
  const std::string account(pick(rng, kAccounts));
  const std::string value = digits(rng, 5);
  TaskText t;
  t.instruction = "Below is a page of the company ledger. Read every entry; one question about it follows.\n";
  t.needle = "\nMemo: the float held for the " + account + " account is: " + value + ".";
  t.question = "\n\nQ: What float was held for the " + account + " account?\nA: The float held for the " + account +
               " account is:";
  t.answers = {value};
  t.max_new_tokens = 12;
  t.filler = append_ledger;
  return t;
}

// --- logbook: timestamped log lines; the code a vault was reset to ---

constexpr std::array<std::string_view, 24> kLevels = {
    "amber", "cobalt", "indigo", "scarlet", "olive", "maroon", "teal",  "violet",
    "crimson", "saffron", "umber", "jade",  "ochre", "sienna",  "azure", "beige",
    "cyan",  "khaki",  "lilac",  "mauve",   "navy",  "plum",    "rust",  "slate"};

std::string timestamp(std::mt19937_64& rng) {
  return std::to_string(draw(rng, 2019, 2034)) + "-" + two_digits(draw(rng, 1, 12)) + "-" +
         two_digits(draw(rng, 1, 28)) + " " + two_digits(draw(rng, 0, 23)) + ":" + two_digits(draw(rng, 0, 59));
}

void append_logbook(std::mt19937_64& rng, int64_t n_lines, std::string* text) {
  for (int64_t i = 0; i < n_lines; ++i) {
    new_line(text);
    *text += timestamp(rng);
    switch (draw(rng, 0, 3)) {
      case 0:
        *text += " gate " + std::to_string(draw(rng, 1, 40)) + " opened by badge " + digits(rng, 5) + ".";
        break;
      case 1:
        *text += " lift " + std::to_string(draw(rng, 1, 9)) + " stopped at floor " + std::to_string(draw(rng, 0, 60)) + ".";
        break;
      case 2:
        *text += " sensor " + std::to_string(draw(rng, 100, 999)) + " read " + std::to_string(draw(rng, 10, 45)) + "." +
                 std::to_string(draw(rng, 0, 9)) + " degrees.";
        break;
      default:
        *text += " door " + std::to_string(draw(rng, 1, 300)) + " closed, badge " + digits(rng, 5) + ".";
        break;
    }
  }
}

TaskText logbook_text(std::mt19937_64& rng) {
  const std::string level(pick(rng, kLevels));
  const std::string code = digits(rng, 5);
  TaskText t;
  t.instruction = "The building's security log follows, one event a line. Answer the question after it.\n";
  t.needle = "\n" + timestamp(rng) + " the new code of the vault on level " + level + " is: " + code + ".";
  t.question = "\n\nWhich code was the vault on level " + level +
               " reset to? From the log, the new code of the vault on level " + level + " is:";
  t.answers = {code};
  t.max_new_tokens = 12;
  t.filler = append_logbook;
  return t;
}

// --- dialogue: a chat among friends; the number one of them tells ---

constexpr std::array<std::string_view, 8> kSpeakers = {"ANNA", "BEN", "CLARA", "DAVID", "ELLA", "FRANK", "GRACE", "HUGO"};
constexpr std::array<std::string_view, 24> kLines = {
    "Did you see the boats this morning?",   "Only the red one, near the pier.",
    "I think it will rain again tonight.",   "Then we should take the coats.",
    "Has anyone fed the cat?",               "Not yet, I was about to.",
    "The soup needs more salt.",             "Leave it, it is fine as it is.",
    "Where did you put the map?",            "On the shelf, under the old letters.",
    "We are late, hurry up.",                "Give me a minute, I cannot find my shoe.",
    "That film was far too long.",           "I liked the music, though.",
    "Shall we walk or take the bus?",        "Walk, the weather is lovely.",
    "Who left the window open?",             "Sorry, that was me.",
    "Are you coming to the market?",         "Maybe later, after lunch.",
    "The garden looks wonderful this year.", "It took a whole summer of work.",
    "Can you hear that noise?",              "It is only the wind in the chimney."};
constexpr std::array<std::string_view, 8> kTellers = {"IRIS", "JONAS", "KATE", "LEO", "MAYA", "NINA", "OSCAR", "PAUL"};
constexpr std::array<std::string_view, 8> kThings = {"locker", "cabin", "seat", "room", "box", "bay", "berth", "stall"};
constexpr std::array<std::string_view, 8> kPlaces = {"station", "harbour", "theatre", "hotel",
                                                     "market",  "depot",   "ferry",   "stadium"};

void append_dialogue(std::mt19937_64& rng, int64_t n_lines, std::string* text) {
  for (int64_t i = 0; i < n_lines; ++i) {
    new_line(text);
    *text += std::string(pick(rng, kSpeakers)) + ": " + std::string(pick(rng, kLines));
  }
}

std::string capitalized(std::string_view name) {
  std::string s(name);
  for (size_t i = 1; i < s.size(); ++i) s[i] = static_cast<char>(s[i] - 'A' + 'a');
  return s;
}

TaskText dialogue_text(std::mt19937_64& rng) {
  const std::string teller(pick(rng, kTellers));
  const std::string thing(pick(rng, kThings));
  const std::string place(pick(rng, kPlaces));
  const std::string value = digits(rng, 6);
  TaskText t;
  t.instruction = "A transcript of friends talking at home. Read it, then continue the conversation.\n";
  t.needle = "\n" + teller + ": Write it down, the number of my " + thing + " at the " + place + " is: " + value + ".";
  t.question = "\nHUGO: " + capitalized(teller) + ", I forgot already. Which number was your " + thing + " at the " +
               place + "?\n" + teller + ": The number of my " + thing + " at the " + place + " is:";
  t.answers = {value};
  t.max_new_tokens = 10;
  t.filler = append_dialogue;
  return t;
}

// --- source: C source code; the value one constant is set to ---

constexpr std::array<std::string_view, 16> kIdents = {"count", "total", "offset", "width", "height", "index",
                                                      "limit", "size",  "depth",  "step",  "rows",   "cols",
                                                      "score", "level", "chunk",  "span"};
constexpr std::array<std::string_view, 24> kConstants = {
    "Orbit",  "Prism",  "Ember",  "Cipher", "Vortex", "Nimbus", "Quasar", "Raven",
    "Sable",  "Tundra", "Vertex", "Willow", "Zenith", "Aurora", "Beacon", "Comet",
    "Dynamo", "Flint",  "Gale",   "Helix",  "Juniper", "Kelvin", "Lumen", "Mistral"};

void append_source(std::mt19937_64& rng, int64_t n_lines, std::string* text) {
  for (int64_t i = 0; i < n_lines; ++i) {
    new_line(text);
    const std::string a(pick(rng, kIdents));
    const std::string b(pick(rng, kIdents));
    const std::string c(pick(rng, kIdents));
    switch (draw(rng, 0, 5)) {
      case 0: *text += "  " + a + " += " + b + "[" + c + "] * " + std::to_string(draw(rng, 2, 9)) + ";"; break;
      case 1: *text += "  if (" + a + " > " + b + ") return -1;"; break;
      case 2: *text += "static int " + a + "_" + b + " = " + std::to_string(draw(rng, 1, 4096)) + ";"; break;
      case 3: *text += "  for (int i = 0; i < " + a + "; ++i) " + b + " += " + c + "[i];"; break;
      case 4: *text += "}\n\nint update_" + a + "(int " + b + ") {"; break;
      default: *text += "  " + a + " = (" + b + " << " + c + ") & mask;"; break;
    }
  }
}

TaskText source_text(std::mt19937_64& rng) {
  const std::string word(pick(rng, kConstants));
  const std::string value = digits(rng, 5);
  TaskText t;
  t.instruction = "// A C source file. Read it; the last lines ask for one value defined in it.\n";
  t.needle = "\nconst long kTimeout" + word + "Ms = " + value + ";  // the timeout of " + word + " in ms is: " + value +
             ".";
  t.question = "\n}\n\n// Q: which value was kTimeout" + word + "Ms given above?\n// A: the timeout of " + word + " in ms is:";
  t.answers = {value};
  t.max_new_tokens = 10;
  t.filler = append_source;
  return t;
}

}  // namespace

const char* heldout_task_names() { return "ledger logbook dialogue source"; }

std::optional<TaskText> heldout_task_text(std::string_view task, std::mt19937_64& rng) {
  if (task == "ledger") return ledger_text(rng);
  if (task == "logbook") return logbook_text(rng);
  if (task == "dialogue") return dialogue_text(rng);
  if (task == "source") return source_text(rng);
  return std::nullopt;
}

}  // namespace leoam::eval
