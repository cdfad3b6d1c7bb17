// JSON for the native programs, in one header so that they read, escape and format alike: a small reader
// (values read one at a time from a stream, so that the probe's request array can arrive element by
// element), the probe's flat result objects, and the streaming events' floats.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace gatehouse {

struct JsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  double num = 0;
  bool integral = false;   // written without a fraction or exponent
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;

  const Json* get(const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &it->second;
  }
};

class Reader {
 public:
  explicit Reader(FILE* in) : in_(in) {}
  int peek() {
    if (!have_) { c_ = std::fgetc(in_); have_ = true; }
    return c_;
  }
  int next() { int c = peek(); have_ = false; if (c != EOF) ++pos_; return c; }
  void ws() { while (peek() == ' ' || peek() == '\n' || peek() == '\r' || peek() == '\t') next(); }
  long pos() const { return pos_; }
  [[noreturn]] void fail(const std::string& what) {
    throw JsonError("malformed JSON at byte " + std::to_string(pos_) + ": " + what);
  }
  void expect(char ch) {
    ws();
    int c = next();
    if (c != ch) fail(std::string("expected '") + ch + "', got " + describe(c));
  }
  static std::string describe(int c) {
    if (c == EOF) return "end of input";
    return std::string("'") + char(c) + "'";
  }

  Json value(int depth = 0) {
    if (depth > 64) fail("nesting too deep");
    ws();
    int c = peek();
    Json v;
    if (c == '{') {
      next(); v.kind = Json::Object; ws();
      if (peek() == '}') { next(); return v; }
      for (;;) {
        ws();
        if (peek() != '"') fail("expected a key string, got " + describe(peek()));
        std::string k = string();
        expect(':');
        v.obj[k] = value(depth + 1);
        ws();
        int d = next();
        if (d == '}') return v;
        if (d != ',') fail("expected ',' or '}', got " + describe(d));
      }
    }
    if (c == '[') {
      next(); v.kind = Json::Array; ws();
      if (peek() == ']') { next(); return v; }
      for (;;) {
        v.arr.push_back(value(depth + 1));
        ws();
        int d = next();
        if (d == ']') return v;
        if (d != ',') fail("expected ',' or ']', got " + describe(d));
      }
    }
    if (c == '"') { v.kind = Json::String; v.str = string(); return v; }
    if (c == 't') { word("true"); v.kind = Json::Bool; v.b = true; return v; }
    if (c == 'f') { word("false"); v.kind = Json::Bool; return v; }
    if (c == 'n') { word("null"); return v; }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail("unexpected " + describe(c));
  }

 private:
  void word(const char* w) {
    for (const char* p = w; *p; ++p)
      if (next() != *p) fail(std::string("expected ") + w);
  }
  Json number() {
    std::string s;
    bool integral = true;
    while (true) {
      int c = peek();
      if ((c >= '0' && c <= '9') || c == '-' || c == '+') { s += char(next()); continue; }
      if (c == '.' || c == 'e' || c == 'E') { integral = false; s += char(next()); continue; }
      break;
    }
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(d)) fail("bad number '" + s + "'");
    Json v; v.kind = Json::Number; v.num = d; v.integral = integral;
    return v;
  }
  std::string string() {
    next();  // opening quote
    std::string out;
    for (;;) {
      int c = next();
      if (c == EOF) fail("unterminated string");
      if (c == '"') return out;
      if (c == '\\') {
        int e = next();
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            unsigned cp = 0;
            for (int i = 0; i < 4; ++i) {
              int h = next();
              cp <<= 4;
              if (h >= '0' && h <= '9') cp |= h - '0';
              else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
              else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
              else fail("bad \\u escape");
            }
            if (cp < 0x80) out += char(cp);
            else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 0x3F)); }
            else { out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
            break;
          }
          default: fail("bad escape");
        }
      } else {
        out += char(c);
      }
    }
  }
  FILE* in_;
  int c_ = 0;
  bool have_ = false;
  long pos_ = 0;
};

// How quote() writes a control character. Both ways read back as the same string; each program keeps the
// one its lines have always had (the probe writes a newline as \n, the streaming engine and feeder as
// \u000a), so that its output stays byte for byte what receipts and captures already hold.
enum class Controls { ShortNewline, AllUnicode };

inline std::string quote(const std::string& s, Controls controls = Controls::ShortNewline) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c == '\n' && controls == Controls::ShortNewline) o += "\\n";
    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); o += b; }
    else o += char(c);
  }
  return o + "\"";
}

// A float for the streaming events: 17 significant digits, so that a clock reads back exactly, and a whole
// number written with ".0", so that Python reads it back as a float and not an int.
inline std::string real(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  std::string s(b);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

inline std::string dump(const Json& v) {
  switch (v.kind) {
    case Json::Null: return "null";
    case Json::Bool: return v.b ? "true" : "false";
    case Json::Number: {
      char b[40];
      if (v.integral && std::fabs(v.num) < 9e15) std::snprintf(b, sizeof b, "%lld", (long long)v.num);
      else std::snprintf(b, sizeof b, "%.17g", v.num);
      return b;
    }
    case Json::String: return quote(v.str);
    case Json::Array: {
      std::string o = "[";
      for (size_t i = 0; i < v.arr.size(); ++i) o += (i ? "," : "") + dump(v.arr[i]);
      return o + "]";
    }
    case Json::Object: {
      std::string o = "{";
      bool first = true;
      for (auto& kv : v.obj) { o += (first ? "" : ",") + quote(kv.first) + ":" + dump(kv.second); first = false; }
      return o + "}";
    }
  }
  return "null";
}

// Builds one flat JSON object in insertion order.
class Obj {
 public:
  Obj& raw(const std::string& k, const std::string& json) { add(k); s_ += json; return *this; }
  Obj& str(const std::string& k, const std::string& v) { return raw(k, quote(v)); }
  Obj& num(const std::string& k, double v) {
    char b[40]; std::snprintf(b, sizeof b, "%.6f", v); return raw(k, b);
  }
  Obj& integer(const std::string& k, long long v) { return raw(k, std::to_string(v)); }
  Obj& boolean(const std::string& k, bool v) { return raw(k, v ? "true" : "false"); }
  template <class T>
  Obj& ints(const std::string& k, const std::vector<T>& v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); ++i) o += (i ? "," : "") + std::to_string((long long)v[i]);
    return raw(k, o + "]");
  }
  Obj& nums(const std::string& k, const std::vector<double>& v) {
    std::string o = "[";
    char b[40];
    for (size_t i = 0; i < v.size(); ++i) { std::snprintf(b, sizeof b, "%.4f", v[i]); o += (i ? "," : "") + std::string(b); }
    return raw(k, o + "]");
  }
  std::string done() const { return s_ + "}"; }

 private:
  void add(const std::string& k) { s_ += (s_.size() > 1 ? "," : "") + quote(k) + ":"; }
  std::string s_ = "{";
};

}  // namespace gatehouse
