// Self-contained stand-ins for RULER's two QA tasks (qa.py reads SQuAD / HotpotQA, which
// hla does not ship). Documents state invented facts about invented places and people:
//   qa_1 (SQuAD-like, one hop): kingdom paragraphs; the question asks one fact of one kingdom.
//   qa_2 (HotpotQA-like, two hops): "{person} was born in {city}" and "{city} is in the
//        kingdom of {kingdom}" are separate documents; the question needs both.
// Distractor documents of the same shapes fill the pool up to the searched document count.
// RULER's document layout ("Document {i}:\n{doc}", joined by blank lines), template, answer
// prefix and string_match_part scoring are kept.
#include <set>

#include "eval/ruler_detail.h"
#include "eval/text_util.h"

namespace hla::eval::ruler {

namespace {

const char* const kTemplate =
    "Answer the question based on the given documents. Only give me the answer and do not "
    "output any other words.\n\nThe following are given documents.\n\n{context}\n\nAnswer the "
    "question based on the given documents. Only give me the answer and do not output any "
    "other words.\n\nQuestion: {query}";
const char* const kAnswerPrefix = " Answer:";

const std::vector<std::string> kCrafts = {
    "pottery",      "weaving",     "glassmaking", "shipbuilding", "metalwork",  "woodcarving",
    "bookbinding", "cheesemaking", "silk dyeing", "clockmaking",  "astronomy", "falconry"};
const std::vector<std::string> kProfessions = {
    "painter",  "poet",      "composer",    "architect",     "astronomer",
    "sculptor", "physician", "cartographer", "mathematician", "playwright"};

template <class T>
const T& pick(const std::vector<T>& items, Rng& rng) {
  return items[rng.below(items.size())];
}

// Invented, pronounceable, capitalised names, never repeated within one sample.
class NameMaker {
 public:
  explicit NameMaker(Rng& rng) : rng_(rng) {}
  std::string operator()() {
    static const std::vector<std::string> onsets = {"b", "br", "c",  "d", "dr", "f", "g",
                                                    "gr", "h", "k", "l", "m",  "n", "p",
                                                    "r",  "s", "st", "t", "th", "v", "z"};
    static const std::vector<std::string> vowels = {"a", "e", "i", "o", "u", "ae", "ei", "ou"};
    static const std::vector<std::string> codas = {"", "", "n", "r", "l", "s", "th", "m"};
    while (true) {
      std::string name;
      int syllables = 2 + static_cast<int>(rng_.below(2));
      for (int s = 0; s < syllables; s++) {
        const std::string& vowel = pick(vowels, rng_);  // drawn first, as in the pinned samples
        name += pick(onsets, rng_) + vowel;
      }
      name += pick(codas, rng_);
      name[0] = static_cast<char>(name[0] - 'a' + 'A');
      if (used_.insert(name).second) return name;
    }
  }

 private:
  Rng& rng_;
  std::set<std::string> used_;
};

struct Question {
  std::string query, answer;
  std::vector<std::string> gold_docs;
};

std::string kingdom_doc(const std::string& kingdom, const std::string& sea,
                        const std::string& capital, int64_t year, const std::string& craft) {
  return kingdom + " is a kingdom on the shore of the " + sea + " Sea. Its capital is " +
         capital + ", which was founded in " + std::to_string(year) + ". The people of " +
         kingdom + " are famous for their " + craft + ".";
}

std::string random_kingdom_doc(NameMaker& name, Rng& rng, Question* question) {
  std::string kingdom = name(), sea = name(), capital = name();
  int64_t year = randint(rng, 900, 1899);
  const std::string& craft = pick(kCrafts, rng);
  if (question) {
    switch (rng.below(4)) {
      case 0: *question = {"What is the capital of " + kingdom + "?", capital, {}}; break;
      case 1: *question = {"In which year was " + capital + " founded?", std::to_string(year), {}}; break;
      case 2: *question = {"What are the people of " + kingdom + " famous for?", craft, {}}; break;
      default: *question = {"On the shore of which sea is " + kingdom + "?", sea, {}}; break;
    }
  }
  return kingdom_doc(kingdom, sea, capital, year, craft);
}

std::string person_doc(const std::string& person, const std::string& profession,
                       const std::string& birth_city, const std::string& work_city) {
  const bool vowel = std::string("aeiou").find(profession[0]) != std::string::npos;
  return person + "\n" + person + (vowel ? " was an " : " was a ") + profession +
         " born in the city of " + birth_city +
         ". " + person + " worked for most of a long life in " + work_city + ".";
}

std::string city_doc(const std::string& city, const std::string& kingdom, const std::string& river) {
  return city + "\n" + city + " is a city in the kingdom of " + kingdom + ". It lies on the river " +
         river + ".";
}

// Draws are sequenced in named variables: two in one expression (a + b, f(x(), y())) are
// unsequenced, and gcc and clang order them differently. The order below, last name before
// first, is the one the pinned samples were made with.
std::string random_person(NameMaker& name) {
  const std::string last = name(), first = name();
  return first + " " + last;
}

std::string random_person_doc(NameMaker& name, Rng& rng) {
  const std::string person = random_person(name);
  const std::string work_city = name(), birth_city = name();
  const std::string& profession = pick(kProfessions, rng);
  return person_doc(person, profession, birth_city, work_city);
}

// A city document of `city` with a new kingdom and river (drawn river first).
std::string new_city_doc(NameMaker& name, const std::string& city) {
  const std::string river = name(), kingdom = name();
  return city_doc(city, kingdom, river);
}

std::string random_city_doc(NameMaker& name) {
  const std::string city = name();
  return new_city_doc(name, city);
}

// Gold documents and question, then distractors up to num_docs.
std::vector<std::string> qa_documents(bool two_hop, int64_t num_docs, Rng& rng, Question& question) {
  NameMaker name(rng);
  std::vector<std::string> docs;
  if (!two_hop) {
    docs.push_back(random_kingdom_doc(name, rng, &question));
    while (static_cast<int64_t>(docs.size()) < num_docs)
      docs.push_back(random_kingdom_doc(name, rng, nullptr));
    return docs;
  }
  std::string person = random_person(name);
  std::string profession = pick(kProfessions, rng);
  std::string birth_city = name(), work_city = name(), kingdom = name(), river = name();
  docs.push_back(person_doc(person, profession, birth_city, work_city));
  docs.push_back(city_doc(birth_city, kingdom, river));
  if (rng.below(2) == 0)
    question = {"In which kingdom was the " + profession + " " + person + " born?", kingdom, {}};
  else
    question = {"On which river lies the city where " + person + " was born?", river, {}};
  // the city where the person worked is the first distractor: a wrong second hop
  if (static_cast<int64_t>(docs.size()) < num_docs) docs.push_back(new_city_doc(name, work_city));
  while (static_cast<int64_t>(docs.size()) < num_docs)
    docs.push_back(docs.size() % 2 ? random_person_doc(name, rng) : random_city_doc(name));
  return docs;
}

Prompt qa_prompt(bool two_hop, int64_t num_docs, Rng& rng) {
  Question question;
  std::vector<std::string> docs = qa_documents(two_hop, num_docs, rng, question);
  shuffle(docs, rng);
  std::vector<std::string> numbered;
  for (size_t i = 0; i < docs.size(); i++)
    numbered.push_back("Document " + std::to_string(i + 1) + ":\n" + docs[i]);
  Prompt prompt;
  prompt.text = format_template(std::string(kTemplate) + kAnswerPrefix,
                                {{"context", join(numbered, "\n\n")}, {"query", question.query}});
  prompt.answers = {question.answer};
  return prompt;
}

}  // namespace

std::vector<RulerSample> generate_qa(const RulerTask& task, const RulerGenOptions& options,
                                     const TokenCounter& count_tokens, Rng& rng) {
  const bool two_hop = task.kind == RulerTask::Kind::QaTwoHop;
  const int64_t incremental = is_short_context(options) ? 2 : 10;
  const SizeSearch search{incremental, incremental, 3.0, generation_budget(task, options.token_scale)};
  PromptAt prompt_at = [&](int64_t n) { return qa_prompt(two_hop, n, rng); };
  const int64_t size = search_size(prompt_at, count_tokens, options.length, search);
  return fit_samples(prompt_at, count_tokens, options, size, search, task.name, kAnswerPrefix);
}

}  // namespace hla::eval::ruler
