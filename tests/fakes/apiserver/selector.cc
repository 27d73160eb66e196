#include "tests/fakes/apiserver/selector.h"

#include <cctype>

namespace ringtrain::fake {
namespace {

using nlohmann::json;

enum class Tok { kId, kEq, kDoubleEq, kNotEq, kBang, kOpen, kClose, kComma, kIn, kNotIn, kEnd };

struct Token {
  Tok kind;
  std::string text;
};

bool IsSpecial(char c) {
  return c == ' ' || c == '\t' || c == ',' || c == '(' || c == ')' || c == '=' || c == '!';
}

std::vector<Token> Lex(const std::string& s) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == ' ' || c == '\t') {
      ++i;
    } else if (c == ',') {
      out.push_back({Tok::kComma, ","});
      ++i;
    } else if (c == '(') {
      out.push_back({Tok::kOpen, "("});
      ++i;
    } else if (c == ')') {
      out.push_back({Tok::kClose, ")"});
      ++i;
    } else if (c == '!' && i + 1 < s.size() && s[i + 1] == '=') {
      out.push_back({Tok::kNotEq, "!="});
      i += 2;
    } else if (c == '!') {
      out.push_back({Tok::kBang, "!"});
      ++i;
    } else if (c == '=' && i + 1 < s.size() && s[i + 1] == '=') {
      out.push_back({Tok::kDoubleEq, "=="});
      i += 2;
    } else if (c == '=') {
      out.push_back({Tok::kEq, "="});
      ++i;
    } else {
      std::size_t j = i;
      while (j < s.size() && !IsSpecial(s[j])) ++j;
      std::string word = s.substr(i, j - i);
      Tok kind = word == "in" ? Tok::kIn : word == "notin" ? Tok::kNotIn : Tok::kId;
      out.push_back({kind, word});
      i = j;
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

Status Unexpected(const Token& t, const std::string& expected) {
  return InvalidArgument("unable to parse requirement: found '" + t.text +
                         "', expected: " + expected);
}

StatusOr<std::vector<Requirement>> ParseRequirements(const std::string& text, bool set_based) {
  std::vector<Requirement> reqs;
  std::vector<Token> toks = Lex(text);
  std::size_t p = 0;
  if (toks[p].kind == Tok::kEnd) return reqs;
  for (;;) {
    Requirement r;
    if (set_based && toks[p].kind == Tok::kBang) {
      ++p;
      if (toks[p].kind != Tok::kId) return Unexpected(toks[p], "identifier");
      r.key = toks[p++].text;
      r.op = Requirement::Op::kDoesNotExist;
    } else {
      if (toks[p].kind != Tok::kId) return Unexpected(toks[p], "identifier");
      r.key = toks[p++].text;
      switch (toks[p].kind) {
        case Tok::kEq:
        case Tok::kDoubleEq:
        case Tok::kNotEq: {
          r.op =
              toks[p].kind == Tok::kNotEq ? Requirement::Op::kNotEquals : Requirement::Op::kEquals;
          ++p;
          if (toks[p].kind == Tok::kId) {
            r.values.push_back(toks[p++].text);
          } else if (toks[p].kind == Tok::kComma || toks[p].kind == Tok::kEnd) {
            r.values.push_back("");
          } else {
            return Unexpected(toks[p], "identifier");
          }
          break;
        }
        case Tok::kIn:
        case Tok::kNotIn: {
          if (!set_based) return Unexpected(toks[p], "'=', '==' or '!='");
          r.op = toks[p].kind == Tok::kIn ? Requirement::Op::kIn : Requirement::Op::kNotIn;
          ++p;
          if (toks[p].kind != Tok::kOpen) return Unexpected(toks[p], "'('");
          ++p;
          for (;;) {
            if (toks[p].kind == Tok::kId) r.values.push_back(toks[p++].text);
            if (toks[p].kind == Tok::kComma) {
              ++p;
              continue;
            }
            if (toks[p].kind == Tok::kClose) {
              ++p;
              break;
            }
            return Unexpected(toks[p], "',' or ')'");
          }
          break;
        }
        case Tok::kComma:
        case Tok::kEnd:
          if (!set_based) return Unexpected(toks[p], "'=', '==' or '!='");
          r.op = Requirement::Op::kExists;
          break;
        default:
          return Unexpected(toks[p], "'=', '!=', '==', 'in', 'notin'");
      }
    }
    reqs.push_back(std::move(r));
    if (toks[p].kind == Tok::kEnd) return reqs;
    if (toks[p].kind != Tok::kComma) return Unexpected(toks[p], "','");
    ++p;
  }
}

bool MatchOne(const Requirement& r, const std::string* value) {
  auto in = [&] {
    for (const auto& v : r.values) {
      if (value != nullptr && *value == v) return true;
    }
    return false;
  };
  switch (r.op) {
    case Requirement::Op::kEquals:
    case Requirement::Op::kIn:
      return in();
    case Requirement::Op::kNotEquals:
    case Requirement::Op::kNotIn:
      return !in();
    case Requirement::Op::kExists:
      return value != nullptr;
    case Requirement::Op::kDoesNotExist:
      return value == nullptr;
  }
  return false;
}

}  // namespace

StatusOr<LabelSelector> LabelSelector::Parse(const std::string& text) {
  LabelSelector s;
  ASSIGN_OR_RETURN(s.requirements_, ParseRequirements(text, /*set_based=*/true));
  return s;
}

bool LabelSelector::Matches(const json& object) const {
  const json* labels = nullptr;
  if (auto m = object.find("metadata"); m != object.end() && m->is_object()) {
    if (auto l = m->find("labels"); l != m->end() && l->is_object()) labels = &*l;
  }
  for (const auto& r : requirements_) {
    std::string value;
    bool present = false;
    if (labels != nullptr) {
      if (auto it = labels->find(r.key); it != labels->end() && it->is_string()) {
        value = it->get<std::string>();
        present = true;
      }
    }
    if (!MatchOne(r, present ? &value : nullptr)) return false;
  }
  return true;
}

StatusOr<FieldSelector> FieldSelector::Parse(const std::string& text) {
  FieldSelector s;
  ASSIGN_OR_RETURN(s.requirements_, ParseRequirements(text, /*set_based=*/false));
  return s;
}

bool FieldSelector::Matches(const json& object) const {
  for (const auto& r : requirements_) {
    const json* cur = &object;
    std::size_t start = 0;
    while (cur != nullptr && start <= r.key.size()) {
      std::size_t dot = r.key.find('.', start);
      std::string part = r.key.substr(start, dot == std::string::npos ? dot : dot - start);
      auto it = cur->is_object() ? cur->find(part) : cur->end();
      cur = (cur->is_object() && it != cur->end()) ? &*it : nullptr;
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    std::string value;
    if (cur != nullptr) {
      value = cur->is_string() ? cur->get<std::string>() : cur->is_null() ? "" : cur->dump();
    }
    // A missing field compares as the empty string, as the API server's field sets do.
    if (!MatchOne(r, &value)) return false;
  }
  return true;
}

}  // namespace ringtrain::fake
