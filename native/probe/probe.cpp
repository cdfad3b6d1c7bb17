// gatehouse-probe: greedy decoding of an ONNX decoder graph through the ONNX Runtime C API, timed.
//
//   gatehouse-probe --graph PATH [--threads N] [--kv auto|concat|share] [--max-seq N] [--kv-heads N] [--head-dim N]
//                   [--overlay PATH | --bundle PATH ...]
//
// stdin:  a JSON array of requests, read element by element (the caller may decide the next request
//         after reading the last result):
//         {"id": any, "prompt_ids": [int], "max_new_tokens": int, "mode": "greedy", "stop_ids": [int],
//          "threads": int, "phi": bool (with --bundle: report the prompt's φ)}
// stdout: one JSON line per request: {"id", "index", "prompt_tokens", "generated_tokens", "prefill_ms",
//         "decode_ms", "decode_tokens", "total_ms", "generated_ids", "token_ms"}; on an error one line
//         {"error", "index", "id", "stage"} and a non-zero exit (2 request, 3 load, 4 runtime).
// stderr: one load receipt line {"event": "load", "load_ms", "threads", "graph_sha256",
//         "runtime_version", "runtime_library", ...}.
//
// KV cache: preallocated at load (capacity --max-seq), bound through IoBinding, never reallocated.
//   concat: graphs whose present = concat(past, new) (Gatehouse's traced exports): two buffers per tensor,
//           past read from one and present written straight into the other, swapped each step.
//   share:  graphs whose present aliases past at full capacity (ORT-GenAI's GroupQueryAttention
//           graphs, past_present_share_buffer): one buffer bound as both past and present.
//   auto:   the graph's metadata gatehouse.kv when present (Gatehouse's fused export says share),
//           else concat with position_ids and share without.
//
// --overlay PATH: a skill overlay (harness/overlay/fileformat.py), replacement initializers in the safetensors
//   layout (u64 LE header length N, N bytes of JSON, the data). The probe checks the header strictly, refuses an
//   overlay whose __metadata__.backbone_sha256 is not the graph's SHA-256, refuses a tensor the graph has no
//   initializer for or whose dtype or shape differs (the graph's protobuf read directly), hands every tensor to
//   ONNX Runtime with AddInitializer over the mapped file (kept until exit), and after CreateSession refuses a
//   tensor ONNX Runtime did not use (an initializer the graph optimizer folded away before overrides apply: ORT
//   ignores those silently). Every refusal is a load error naming the overlay file and the tensor or field. The
//   load receipt gains "overlay": {"path", "sha256", "tensors", "bytes", "copied", "check_ms"} (null without it).
//   Tensors named "__routing__/..." are a bundle's routing data, not initializers: --overlay leaves them.
//
// --bundle PATH (repeatable): skill bundles (harness/overlay/bundle.py), each an overlay file whose __metadata__
//   also holds gatehouse_bundle "1", skill (its id), routing (JSON: the feature φ and two subspaces, general and
//   skill, whose mean and basis are F32 tensors "__routing__/<side>/mean" [dim] and ".../basis" [rank, dim]) and
//   contract (JSON: what the skill was judged under). Each is checked as an overlay, then its routing and the
//   contract's identity fields, strictly; every refusal is a load error naming the file and the field. One session
//   is created for the backbone and one per bundle (its tensors added with AddInitializer, checked used). Every
//   request is then routed: a prefill of the prompt on the backbone session, φ from present.L.value (the mean and
//   the population standard deviation over the prompt's positions of each channel, heads concatenated:
//   routing.hpp), the reconstruction error under every subspace (every bundle's general subspace first, then the
//   skill ones, each in skill-id order; the first smallest wins), and the generation on the chosen session (the
//   backbone when a general subspace wins), prefilled again from an empty cache. The result line gains "route":
//   {"bundle" (the skill id or null), "subspace", "errors": {name: mse}, "prefill_ms", "phi_ms", "choose_ms",
//   "route_ms" (their sum: the time routing adds), and "phi" when asked}; its prefill_ms, decode_ms and total_ms
//   are the chosen session's. The load receipt gains "bundles": [{"path", "sha256", "skill", "tensors", "bytes",
//   "copied", "check_ms", "session_ms", "ranks"}] and "routing": {"feature", "layer", "output", "dim",
//   "subspaces" (in routing order)} (both null without --bundle).
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/json.hpp"
#include "common/sha256.hpp"
#include "onnxruntime_cxx_api.h"
#include "routing.hpp"

using Clock = std::chrono::steady_clock;
using gatehouse::Json;
using gatehouse::Obj;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Fatal {
  int code;
  std::string stage;
  std::string message;
};

std::string g_request_id = "null";
long g_request_index = -1;

[[noreturn]] void die(const Fatal& f) {
  Obj o;
  o.str("error", f.message).str("stage", f.stage);
  if (g_request_index >= 0) o.integer("index", g_request_index); else o.raw("index", "null");
  o.raw("id", g_request_id);
  std::string line = o.done();
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::exit(f.code);
}

std::string type_name(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    default: return "type" + std::to_string(int(t));
  }
}

// An integer input (ids, mask, positions) kept in the element type the graph asks for.
struct IntBuffer {
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  std::vector<int64_t> i64;
  std::vector<int32_t> i32;
  void resize(size_t n) { if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64) i64.assign(n, 0); else i32.assign(n, 0); }
  void set(size_t i, int64_t v) { if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64) i64[i] = v; else i32[i] = int32_t(v); }
  Ort::Value view(const OrtMemoryInfo* mem, size_t offset, const std::vector<int64_t>& shape, size_t count) {
    if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64)
      return Ort::Value::CreateTensor<int64_t>(mem, i64.data() + offset, count, shape.data(), shape.size());
    return Ort::Value::CreateTensor<int32_t>(mem, i32.data() + offset, count, shape.data(), shape.size());
  }
};

// -- the skill overlay (--overlay) -----------------------------------------------------------------
// A file mapped private (pages copied on write, never written back) and never unmapped: ONNX Runtime reads the
// overlay's tensors from it for as long as the session lives, which is until the process ends.
struct Mapped {
  unsigned char* data = nullptr;
  size_t size = 0;
};

bool map_file(const std::string& path, Mapped* m, std::string* err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) { *err = std::string("cannot open: ") + std::strerror(errno); return false; }
  struct stat st {};
  if (::fstat(fd, &st) != 0) { *err = std::string("cannot stat: ") + std::strerror(errno); ::close(fd); return false; }
  m->size = size_t(st.st_size);
  if (m->size > 0) {
    void* p = ::mmap(nullptr, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) { *err = std::string("cannot map: ") + std::strerror(errno); ::close(fd); return false; }
    m->data = static_cast<unsigned char*>(p);
  }
  ::close(fd);
  return true;
}

// The overlay dtypes (safetensors names), with ONNX Runtime's element type and ONNX's TensorProto.DataType.
struct DType {
  const char* name;
  ONNXTensorElementDataType ort;
  int onnx;
  size_t size;
};
const DType kDTypes[] = {{"U8", ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, 2, 1},   {"I8", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, 3, 1},
                         {"F32", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, 1, 4},  {"F16", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, 10, 2},
                         {"I64", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, 7, 8},  {"I32", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, 6, 4}};

std::string known_dtypes() {
  std::string s;
  for (auto& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

const DType* dtype_of_onnx(int onnx) {
  for (auto& d : kDTypes) if (d.onnx == onnx) return &d;
  return nullptr;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct OverlayTensor {
  std::string name;
  const DType* dtype = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

const std::string kReserved = "__routing__/";  // tensor names a bundle keeps its routing under: not initializers

struct Overlay {
  std::string path, sha256;
  Mapped file;
  size_t data_start = 0;
  std::vector<OverlayTensor> tensors;   // initializers
  std::vector<OverlayTensor> reserved;  // kReserved names (a bundle's subspaces)
  std::map<std::string, std::string> meta;
  uint64_t bytes = 0;
  long copied = 0;  // tensors whose mapped bytes were not aligned to their element size: copied, aligned
};

// A non-negative integer written without a fraction, exactly representable as a double.
bool json_count(const Json& v, uint64_t* out) {
  if (v.kind != Json::Number || !v.integral || v.num < 0 || v.num > 9007199254740992.0) return false;
  *out = uint64_t(v.num);
  return true;
}

bool is_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Reads and checks an overlay file; any problem is a load error naming the file and the tensor or field.
Overlay read_overlay(const std::string& path, const std::string& graph, const std::string& graph_sha256) {
  auto fail = [&](const std::string& what) { die({3, "load", path + ": " + what}); };
  Overlay ov;
  ov.path = path;
  std::string err;
  if (!map_file(path, &ov.file, &err)) fail("cannot read the overlay: " + err);
  const size_t size = ov.file.size;
  if (size < 8)
    fail("truncated overlay: " + std::to_string(size) + " bytes, not even the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | ov.file.data[i];
  if (n > size - 8)
    fail("truncated overlay: the header length is " + std::to_string(n) + " bytes, the file has " +
         std::to_string(size - 8) + " after the length");
  ov.data_start = 8 + size_t(n);
  const uint64_t body = size - ov.data_start;
  gatehouse::Sha256 h;
  h.update(ov.file.data, size);
  ov.sha256 = h.hex();

  Json header;
  FILE* mem = n > 0 ? ::fmemopen(ov.file.data + 8, size_t(n), "r") : nullptr;
  if (!mem) fail("the overlay header (" + std::to_string(n) + " bytes) is not JSON: empty");
  try {
    gatehouse::Reader r(mem);
    header = r.value();
    r.ws();
    if (r.peek() != EOF) r.fail("trailing bytes after the header object");
  } catch (const gatehouse::JsonError& e) {
    std::fclose(mem);
    fail(std::string("the overlay header is not JSON: ") + e.what());
  }
  std::fclose(mem);
  if (header.kind != Json::Object) fail("the overlay header must be a JSON object");

  const Json* meta = header.get("__metadata__");
  if (!meta || meta->kind != Json::Object) fail("__metadata__ is missing or not an object: not a Gatehouse overlay");
  for (auto& kv : meta->obj) {
    if (kv.second.kind != Json::String) fail("__metadata__." + kv.first + " must be a string, got " + gatehouse::dump(kv.second));
    ov.meta[kv.first] = kv.second.str;
  }
  const Json* format = meta->get("gatehouse_overlay");
  if (!format || format->str != "1")
    fail("__metadata__.gatehouse_overlay must be \"1\", got " + (format ? gatehouse::dump(*format) : std::string("nothing")) +
         ": not a Gatehouse overlay");
  const Json* backbone = meta->get("backbone_sha256");
  if (!backbone || !is_sha256(backbone->str))
    fail("__metadata__.backbone_sha256 must be 64 lowercase hex digits, got " +
         (backbone ? gatehouse::dump(*backbone) : std::string("nothing")));
  if (backbone->str != graph_sha256)
    fail("__metadata__.backbone_sha256 is " + backbone->str + ", but the backbone graph " + graph + " has SHA-256 " +
         graph_sha256 + ": this overlay was encoded for another backbone");

  for (auto& kv : header.obj) {
    if (kv.first == "__metadata__") continue;
    const std::string where = "tensor '" + kv.first + "'";
    const Json& e = kv.second;
    if (e.kind != Json::Object) fail(where + ": its entry must be an object, got " + gatehouse::dump(e));
    for (auto& f : e.obj)
      if (f.first != "dtype" && f.first != "shape" && f.first != "data_offsets")
        fail(where + ": unknown field '" + f.first + "' (an entry has dtype, shape and data_offsets)");
    OverlayTensor t;
    t.name = kv.first;
    const Json* dt = e.get("dtype");
    if (!dt || dt->kind != Json::String) fail(where + ": dtype is missing or not a string");
    for (auto& d : kDTypes) if (dt->str == d.name) t.dtype = &d;
    if (!t.dtype) fail(where + ": unknown dtype '" + dt->str + "' (an overlay holds " + known_dtypes() + ")");
    const Json* sh = e.get("shape");
    if (!sh || sh->kind != Json::Array) fail(where + ": shape is missing or not an array");
    uint64_t count = 1;
    for (auto& d : sh->arr) {
      uint64_t v = 0;
      if (!json_count(d, &v) || v > uint64_t(INT64_MAX)) fail(where + ": shape " + gatehouse::dump(*sh) + " is not a list of sizes");
      if (__builtin_mul_overflow(count, v, &count)) fail(where + ": shape " + gatehouse::dump(*sh) + " overflows");
      t.shape.push_back(int64_t(v));
    }
    const Json* off = e.get("data_offsets");
    if (!off || off->kind != Json::Array || off->arr.size() != 2 || !json_count(off->arr[0], &t.begin) ||
        !json_count(off->arr[1], &t.end) || t.begin > t.end)
      fail(where + ": data_offsets must be [begin, end] with begin <= end, got " + (off ? gatehouse::dump(*off) : std::string("nothing")));
    if (t.end > body)
      fail(where + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] overrun the data (" +
           std::to_string(body) + " bytes after the header): truncated or corrupt");
    uint64_t need = 0;
    if (__builtin_mul_overflow(count, uint64_t(t.dtype->size), &need) || t.end - t.begin != need)
      fail(where + ": " + std::to_string(t.end - t.begin) + " bytes for " + t.dtype->name + " of shape " +
           shape_text(t.shape) + " (" + std::to_string(need) + " expected)");
    if (t.name.compare(0, kReserved.size(), kReserved) == 0) {
      ov.reserved.push_back(std::move(t));
      continue;
    }
    ov.bytes += need;
    ov.tensors.push_back(std::move(t));
  }
  if (ov.tensors.empty()) fail("the overlay holds no tensors");
  std::vector<const OverlayTensor*> order;
  for (auto& t : ov.tensors) order.push_back(&t);
  for (auto& t : ov.reserved) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const OverlayTensor* a, const OverlayTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->begin < order[i - 1]->end)
      fail("tensors '" + order[i - 1]->name + "' and '" + order[i]->name + "' overlap in the data (bytes " +
           std::to_string(order[i]->begin) + " to " + std::to_string(order[i - 1]->end) + ")");
  return ov;
}

// The top-level initializers of an ONNX graph (name -> ONNX data type and dims), read from the ModelProto's bytes:
// ModelProto.graph (7) -> GraphProto.initializer (5) -> TensorProto dims (1), data_type (2), name (8).
struct GraphInit {
  int type = 0;
  std::vector<int64_t> dims;
};

class Proto {
 public:
  Proto(const unsigned char* p, const unsigned char* e) : p_(p), e_(e) {}
  bool done() const { return p_ >= e_; }
  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= e_) return false;
      unsigned char b = *p_++;
      *v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  // One field: its number, wire type, a varint value or the bounds of a length-delimited payload.
  bool field(uint32_t* number, int* wire, uint64_t* value, Proto* payload) {
    uint64_t key = 0;
    if (!varint(&key)) return false;
    *number = uint32_t(key >> 3);
    *wire = int(key & 7);
    switch (*wire) {
      case 0: return varint(value);
      case 1: if (e_ - p_ < 8) return false; p_ += 8; return true;
      case 5: if (e_ - p_ < 4) return false; p_ += 4; return true;
      case 2: {
        uint64_t len = 0;
        if (!varint(&len) || len > uint64_t(e_ - p_)) return false;
        *payload = Proto(p_, p_ + len);
        p_ += len;
        return true;
      }
      default: return false;
    }
  }
  std::string text() const { return std::string(reinterpret_cast<const char*>(p_), size_t(e_ - p_)); }

 private:
  const unsigned char* p_;
  const unsigned char* e_;
};

bool graph_initializers(const Mapped& m, std::map<std::string, GraphInit>* out) {
  Proto model(m.data, m.data + m.size);
  uint32_t num; int wire; uint64_t val; Proto sub(nullptr, nullptr);
  while (!model.done()) {
    if (!model.field(&num, &wire, &val, &sub)) return false;
    if (num != 7 || wire != 2) continue;
    Proto graph = sub;
    while (!graph.done()) {
      if (!graph.field(&num, &wire, &val, &sub)) return false;
      if (num != 5 || wire != 2) continue;
      Proto tensor = sub;
      GraphInit gi;
      std::string name;
      while (!tensor.done()) {
        if (!tensor.field(&num, &wire, &val, &sub)) return false;
        if (num == 1 && wire == 0) gi.dims.push_back(int64_t(val));
        else if (num == 1 && wire == 2) {
          Proto packed = sub;
          while (!packed.done()) { if (!packed.varint(&val)) return false; gi.dims.push_back(int64_t(val)); }
        } else if (num == 2 && wire == 0) gi.type = int(val);
        else if (num == 8 && wire == 2) name = sub.text();
      }
      (*out)[name] = gi;
    }
  }
  return true;
}

// Every overlay tensor must replace an initializer of the graph with the same dtype and shape: ONNX Runtime ignores
// an unknown name silently and takes another shape until a kernel reads past it.
void check_against_graph(const Overlay& ov, const std::string& graph) {
  Mapped g;
  std::string err;
  if (!map_file(graph, &g, &err)) die({3, "load", graph + ": " + err});
  std::map<std::string, GraphInit> inits;
  bool ok = graph_initializers(g, &inits);
  if (g.data) ::munmap(g.data, g.size);
  if (!ok) die({3, "load", graph + ": cannot read the graph's initializers (malformed ONNX protobuf) to check the overlay " + ov.path});
  for (auto& t : ov.tensors) {
    auto it = inits.find(t.name);
    if (it == inits.end())
      die({3, "load", ov.path + ": tensor '" + t.name + "' is not an initializer of " + graph +
                          " (onnxruntime would ignore it silently)"});
    const DType* want = dtype_of_onnx(it->second.type);
    if (want != t.dtype || it->second.dims != t.shape)
      die({3, "load", ov.path + ": tensor '" + t.name + "' is " + t.dtype->name + " " + shape_text(t.shape) +
                          ", the graph's initializer is " + (want ? want->name : ("ONNX type " + std::to_string(it->second.type)).c_str()) +
                          " " + shape_text(it->second.dims) + ": an encoding the graph cannot take"});
  }
}

// -- skill bundles (--bundle) ---------------------------------------------------------------------------
const std::string kFeature = "present_value_mean_std";
const long kMaxRank = 8;

// One JSON object of a bundle's metadata, its fields read by name: a load error names the file and the field.
struct Fields {
  const Overlay& ov;
  std::string where;  // "__metadata__.routing.feature"
  const Json& obj;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    die({3, "load", ov.path + ": " + where + (field.empty() ? "" : "." + field) + ": " + what});
  }
  void exactly(std::initializer_list<const char*> keys) const {
    if (obj.kind != Json::Object) fail("", "expected an object, got " + gatehouse::dump(obj));
    for (auto& kv : obj.obj) {
      bool known = false;
      for (const char* k : keys) known = known || kv.first == k;
      if (!known) fail("", "unknown key '" + kv.first + "'");
    }
    for (const char* k : keys)
      if (!obj.get(k)) fail("", std::string("missing key '") + k + "'");
  }
  const Json& at(const char* key) const { return *obj.get(key); }
  long integer(const char* key, long lo, long hi, const std::string& why = "") const {
    const Json& v = at(key);
    if (v.kind != Json::Number || !v.integral) fail(key, "expected an integer, got " + gatehouse::dump(v));
    if (v.num < double(lo) || v.num > double(hi))
      fail(key, gatehouse::dump(v) + " is out of " + std::to_string(lo) + ".." + std::to_string(hi) + why);
    return long(v.num);
  }
  std::string text(const char* key, const std::string& expected = "") const {
    const Json& v = at(key);
    if (v.kind != Json::String || v.str.empty()) fail(key, "expected a non-empty string, got " + gatehouse::dump(v));
    if (!expected.empty() && v.str != expected) fail(key, "expected \"" + expected + "\", got " + gatehouse::dump(v));
    return v.str;
  }
};

// A JSON text held in a metadata string, parsed.
Json metadata_json(const Overlay& ov, const std::string& key) {
  auto fail = [&](const std::string& what) { die({3, "load", ov.path + ": __metadata__." + key + ": " + what}); };
  auto it = ov.meta.find(key);
  if (it == ov.meta.end()) fail("missing: a skill bundle records it as a JSON text");
  FILE* mem = it->second.empty() ? nullptr : ::fmemopen(const_cast<char*>(it->second.data()), it->second.size(), "r");
  if (!mem) fail("is not JSON: empty");
  Json v;
  try {
    gatehouse::Reader r(mem);
    v = r.value();
    r.ws();
    if (r.peek() != EOF) r.fail("trailing bytes after the value");
  } catch (const gatehouse::JsonError& e) {
    std::fclose(mem);
    fail(std::string("is not JSON: ") + e.what());
  }
  std::fclose(mem);
  if (v.kind != Json::Object) fail("expected a JSON object, got " + gatehouse::dump(v));
  return v;
}

// A routing tensor ("__routing__/<name>"): F32 of exactly `shape`, finite, read into doubles.
std::vector<double> routing_tensor(const Overlay& ov, const std::string& name, const std::vector<int64_t>& shape) {
  const std::string full = kReserved + name;
  const OverlayTensor* t = nullptr;
  for (auto& r : ov.reserved) if (r.name == full) t = &r;
  if (!t) die({3, "load", ov.path + ": tensor '" + full + "' is missing (__metadata__.routing names it)"});
  if (std::string(t->dtype->name) != "F32" || t->shape != shape)
    die({3, "load", ov.path + ": tensor '" + full + "' is " + t->dtype->name + " " + shape_text(t->shape) +
                        ", __metadata__.routing says F32 " + shape_text(shape)});
  std::vector<double> out(size_t(t->end - t->begin) / 4);
  const unsigned char* p = ov.file.data + ov.data_start + t->begin;
  for (size_t i = 0; i < out.size(); ++i) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    if (!std::isfinite(f)) die({3, "load", ov.path + ": tensor '" + full + "' holds a value that is not finite"});
    out[i] = double(f);
  }
  return out;
}

struct BundleRouting {
  std::string skill;
  long layer = 0;
  std::vector<gatehouse::Subspace> subspaces;  // general, skill
};

// A bundle's routing, checked against the graph it will route for (its layers and cache dims), and the identity
// fields of its contract (version, skill, backbone, a gate verdict at least; harness/overlay/bundle.py reads the rest).
BundleRouting read_routing(const Overlay& ov, long layers, long kv_heads, long head_dim) {
  auto meta = ov.meta.find("gatehouse_bundle");
  if (meta == ov.meta.end() || meta->second != "1")
    die({3, "load", ov.path + ": __metadata__.gatehouse_bundle must be \"1\", got " +
                        (meta == ov.meta.end() ? std::string("nothing") : gatehouse::quote(meta->second)) +
                        ": an overlay file, not a skill bundle (apply it with --overlay)"});
  BundleRouting b;
  auto skill = ov.meta.find("skill");
  if (skill == ov.meta.end() || skill->second.empty())
    die({3, "load", ov.path + ": __metadata__.skill must be a non-empty id"});
  b.skill = skill->second;
  Json routing = metadata_json(ov, "routing");
  Fields r{ov, "__metadata__.routing", routing};
  r.exactly({"version", "metric", "feature", "subspaces"});
  r.text("version", "1");
  r.text("metric", "mse");
  Fields f{ov, "__metadata__.routing.feature", r.at("feature")};
  f.exactly({"kind", "layer", "kv_heads", "head_dim", "dim"});
  f.text("kind", kFeature);
  b.layer = f.integer("layer", 0, layers - 1, " (the graph has " + std::to_string(layers) + " layers)");
  f.integer("kv_heads", kv_heads, kv_heads, " (the graph's cache has " + std::to_string(kv_heads) + " kv heads)");
  f.integer("head_dim", head_dim, head_dim, " (the graph's cache has head_dim " + std::to_string(head_dim) + ")");
  const long dim = 2 * kv_heads * head_dim;
  f.integer("dim", dim, dim, " (2 x kv_heads x head_dim)");
  Fields ss{ov, "__metadata__.routing.subspaces", r.at("subspaces")};
  ss.exactly({"general", "skill"});
  for (auto& t : ov.reserved) {
    bool known = false;
    for (const char* side : {"general/", "skill/"})
      for (const char* part : {"mean", "basis"}) known = known || t.name == kReserved + side + part;
    if (!known)
      die({3, "load", ov.path + ": tensor '" + t.name + "': not a routing tensor (a bundle holds " + kReserved +
                          "general|skill/mean|basis)"});
  }
  for (const char* side : {"general", "skill"}) {
    Fields e{ov, std::string("__metadata__.routing.subspaces.") + side, ss.at(side)};
    e.exactly({"rank", "fit_prompts", "prompt_tokens", "prompts_sha256", "text"});
    const long fit = e.integer("fit_prompts", 1, LONG_MAX);
    gatehouse::Subspace s;
    s.rank = e.integer("rank", 0, std::min(kMaxRank, fit - 1), " (at most min(8, fit_prompts - 1))");
    e.integer("prompt_tokens", 1, LONG_MAX);
    if (!is_sha256(e.text("prompts_sha256"))) e.fail("prompts_sha256", "expected 64 lowercase hex digits");
    e.text("text");
    s.name = b.skill + "/" + side;
    s.mean = routing_tensor(ov, std::string(side) + "/mean", {dim});
    s.basis = routing_tensor(ov, std::string(side) + "/basis", {s.rank, dim});
    b.subspaces.push_back(std::move(s));
  }
  Json contract = metadata_json(ov, "contract");
  Fields c{ov, "__metadata__.contract", contract};
  for (const char* key : {"version", "skill", "backbone_sha256", "gates"})
    if (!contract.get(key)) c.fail("", std::string("missing key '") + key + "'");
  c.text("version", "1");
  c.text("skill", b.skill);
  c.text("backbone_sha256", ov.meta.at("backbone_sha256"));
  if (c.at("gates").kind != Json::Object || c.at("gates").obj.empty())
    c.fail("gates", "expected an object of gate verdicts, got " + gatehouse::dump(c.at("gates")));
  return b;
}

// ONNX Runtime's log lines during session creation, kept to learn which overlay tensors it used: at INFO it says
// "Using user supplied initializer with name (NAME)." for every override it applied, and "Removing initializer
// 'NAME'. ..." for an initializer the optimizer left unused. Errors and warnings are written to stderr as before.
struct OrtLog {
  std::mutex mu;
  std::set<std::string> used, removed;
};

void ORT_API_CALL ort_log(void* param, OrtLoggingLevel severity, const char* category, const char* logid,
                          const char* code_location, const char* message) {
  auto* log = static_cast<OrtLog*>(param);
  std::string m = message ? message : "";
  static const std::string used = "Using user supplied initializer with name (", removed = "Removing initializer '";
  {
    std::lock_guard<std::mutex> lock(log->mu);
    if (m.compare(0, used.size(), used) == 0 && m.size() >= used.size() + 2)
      log->used.insert(m.substr(used.size(), m.rfind(')') - used.size()));
    else if (m.compare(0, removed.size(), removed) == 0 && m.find('\'', removed.size()) != std::string::npos)
      log->removed.insert(m.substr(removed.size(), m.find('\'', removed.size()) - removed.size()));
  }
  if (severity >= ORT_LOGGING_LEVEL_ERROR)
    std::fprintf(stderr, "[onnxruntime %s %s %s] %s\n", category ? category : "", logid ? logid : "",
                 code_location ? code_location : "", m.c_str());
}

struct Args {
  std::string graph;
  int threads = 2;
  std::string kv = "auto";
  long max_seq = 1024;
  long kv_heads = 0;   // overrides for graphs whose cache dims are symbolic
  long head_dim = 0;
  std::string overlay;  // a skill overlay file applied at session creation
  std::vector<std::string> bundles;  // skill bundles routed among per request
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto need = [&](const char* what) -> std::string {
      if (i + 1 >= argc) die({3, "arguments", std::string("missing value for ") + what});
      return argv[++i];
    };
    auto integer = [&](const char* what) -> long {
      std::string v = need(what);
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1) die({3, "arguments", std::string(what) + ": expected a positive integer, got '" + v + "'"});
      return n;
    };
    if (k == "--graph") a.graph = need("--graph");
    else if (k == "--threads") a.threads = int(integer("--threads"));
    else if (k == "--kv") a.kv = need("--kv");
    else if (k == "--max-seq") a.max_seq = integer("--max-seq");
    else if (k == "--kv-heads") a.kv_heads = integer("--kv-heads");
    else if (k == "--head-dim") a.head_dim = integer("--head-dim");
    else if (k == "--overlay") {
      a.overlay = need("--overlay");
      if (a.overlay.empty()) die({3, "arguments", "--overlay: expected a path, got ''"});
    }
    else if (k == "--bundle") {
      a.bundles.push_back(need("--bundle"));
      if (a.bundles.back().empty()) die({3, "arguments", "--bundle: expected a path, got ''"});
    }
    else die({3, "arguments", "unknown argument '" + k + "'"});
  }
  if (a.graph.empty()) die({3, "arguments", "--graph PATH is required"});
  if (!a.overlay.empty() && !a.bundles.empty())
    die({3, "arguments", "--overlay and --bundle exclude each other (a bundle routes its own overlay)"});
  if (a.kv != "auto" && a.kv != "concat" && a.kv != "share")
    die({3, "arguments", "--kv: expected auto, concat or share, got '" + a.kv + "'"});
  return a;
}

// One session on the graph: the backbone, or the graph with an overlay's (or a bundle's) tensors. The overlay's
// mapped file, its values and their aligned copies outlive the session (declared first: destroyed last).
struct Runner {
  Overlay overlay;
  std::vector<Ort::Value> values;
  std::vector<std::vector<uint64_t>> copies;
  std::string skill;       // a bundle's id (empty: the backbone or --overlay)
  long ranks[2] = {0, 0};  // a bundle's general and skill subspace ranks
  double check_ms = 0, session_ms = 0;
  Ort::Session session{nullptr};
  Ort::IoBinding binding{nullptr};
};

const long kInterOp = 1;  // reported in the load record's session settings

// What routing a request chose, and what it cost (before the chosen session prefills again).
struct Choice {
  size_t subspace = 0;
  std::vector<double> phi, errors;
  double prefill_ms = 0, phi_ms = 0, choose_ms = 0, route_ms = 0;
};

class Probe {
 public:
  explicit Probe(const Args& a) : args_(a), mem_(Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault)) {}

  void load() {
    std::string err;
    auto th = Clock::now();
    sha256_ = gatehouse::sha256_file(args_.graph, &err);
    if (!err.empty()) die({3, "load", args_.graph + ": " + err});
    double hash_ms = ms_since(th);

    // runners_[0]: the backbone (or, with --overlay, the overlaid graph); with --bundle, one more per bundle
    const bool overlaid = !args_.overlay.empty(), routed = !args_.bundles.empty();
    runners_.push_back(std::make_unique<Runner>());
    std::vector<std::string> files = overlaid ? std::vector<std::string>{args_.overlay} : args_.bundles;
    for (size_t i = 0; i < files.size(); ++i) {
      Runner* r = overlaid ? runners_[0].get() : runners_.emplace_back(std::make_unique<Runner>()).get();
      auto to = Clock::now();
      r->overlay = read_overlay(files[i], args_.graph, sha256_);
      check_against_graph(r->overlay, args_.graph);
      r->check_ms = ms_since(to);
    }

    auto t0 = Clock::now();
    if (overlaid || routed)  // ONNX Runtime's log is read to learn which overrides it applied (ort_log)
      env_ = Ort::Env(ORT_LOGGING_LEVEL_ERROR, "gatehouse-probe", ort_log, &ort_log_);
    else
      env_ = Ort::Env(ORT_LOGGING_LEVEL_ERROR, "gatehouse-probe");
    // Runs log at ERROR whatever the session's level (an overlaid session's is INFO, for its creation only).
    run_options_.SetRunLogSeverityLevel(ORT_LOGGING_LEVEL_ERROR);
    create(*runners_[0], overlaid);
    introspect();
    for (size_t i = 1; i < runners_.size(); ++i) {
      Runner& r = *runners_[i];
      auto tr = Clock::now();
      BundleRouting b = read_routing(r.overlay, long(past_names_.size() / 2), kv_heads_, head_dim_);
      r.skill = b.skill;
      r.check_ms += ms_since(tr);
      for (size_t j = 1; j < i; ++j)
        if (runners_[j]->skill == r.skill)
          die({3, "load", r.overlay.path + ": __metadata__.skill '" + r.skill + "' is also the skill of " +
                              runners_[j]->overlay.path});
      if (i > 1 && b.layer != route_layer_)
        die({3, "load", r.overlay.path + ": __metadata__.routing.feature.layer " + std::to_string(b.layer) + " differs from " +
                            runners_[1]->overlay.path + "'s " + std::to_string(route_layer_) +
                            ": bundles routed together read one feature"});
      route_layer_ = b.layer;
      b.subspaces[0].runner = 0;  // a general subspace winning keeps the backbone
      b.subspaces[1].runner = i;
      r.ranks[0] = b.subspaces[0].rank;
      r.ranks[1] = b.subspaces[1].rank;
      for (auto& s : b.subspaces) subspaces_.push_back(std::move(s));
      create(r, true);
    }
    // every general subspace first, then the skill ones, each in skill-id order (harness/overlay/bundle.py)
    std::stable_sort(subspaces_.begin(), subspaces_.end(), [this](const gatehouse::Subspace& a, const gatehouse::Subspace& b) {
      bool ga = a.runner == 0, gb = b.runner == 0;
      if (ga != gb) return ga;
      return a.name < b.name;
    });
    allocate();
    active_ = runners_[0].get();
    double load_ms = ms_since(t0);

    Dl_info info{};
    std::string lib = "unknown";
    if (dladdr(reinterpret_cast<void*>(&OrtGetApiBase), &info) && info.dli_fname) {
      char real[PATH_MAX];
      lib = realpath(info.dli_fname, real) ? real : info.dli_fname;
    }
    Obj o;
    o.str("event", "load").num("load_ms", load_ms).num("hash_ms", hash_ms).integer("threads", args_.threads)
        .str("graph", args_.graph).str("graph_sha256", sha256_)
        .str("runtime_version", OrtGetApiBase()->GetVersionString()).str("runtime_library", lib)
        .integer("api_version", ORT_API_VERSION).str("kv_mode", kv_mode_).integer("layers", long(past_names_.size() / 2))
        .integer("kv_heads", kv_heads_).integer("head_dim", head_dim_).integer("vocab", vocab_)
        .integer("max_seq", args_.max_seq).boolean("position_ids", has_positions_)
        .str("kv_dtype", "float32").integer("kv_bytes_allocated", long(kv_bytes_))
        .raw("session", Obj().str("execution_provider", "CPUExecutionProvider").str("graph_optimization_level", "all")
                             .integer("intra_op_threads", args_.threads).integer("inter_op_threads", kInterOp)
                             .str("execution_mode", "sequential").raw("free_dimension_overrides", "{}")
                             .raw("config_entries", "{}").done());
    auto overlay_record = [](const Runner& r) {
      return Obj().str("path", r.overlay.path).str("sha256", r.overlay.sha256)
          .integer("tensors", long(r.overlay.tensors.size())).integer("bytes", long(r.overlay.bytes))
          .integer("copied", r.overlay.copied).num("check_ms", r.check_ms);
    };
    o.raw("overlay", overlaid ? overlay_record(*runners_[0]).done() : "null");
    if (routed) {
      std::string bundles = "[", names = "[";
      for (size_t i = 1; i < runners_.size(); ++i) {
        const Runner& r = *runners_[i];
        bundles += (i > 1 ? "," : "") + overlay_record(r).str("skill", r.skill).num("session_ms", r.session_ms)
            .raw("ranks", Obj().integer("general", r.ranks[0]).integer("skill", r.ranks[1]).done()).done();
      }
      for (size_t i = 0; i < subspaces_.size(); ++i) names += (i ? "," : "") + gatehouse::quote(subspaces_[i].name);
      o.raw("bundles", bundles + "]")
          .raw("routing", Obj().str("feature", kFeature).integer("layer", route_layer_).str("output", "present." +
               std::to_string(route_layer_) + ".value").integer("dim", 2 * kv_heads_ * head_dim_)
               .raw("subspaces", names + "]").done());
    } else {
      o.raw("bundles", "null").raw("routing", "null");
    }
    std::fprintf(stderr, "%s\n", o.done().c_str());
    std::fflush(stderr);
  }

  void serve() {
    gatehouse::Reader r(stdin);
    try {
      r.expect('[');
      r.ws();
      if (r.peek() == ']') { r.next(); return; }
      for (long index = 0;; ++index) {
        g_request_index = index;
        g_request_id = "null";
        Json req = r.value();
        handle(req, index);
        r.ws();
        int c = r.next();
        if (c == ']') break;
        if (c != ',')
          r.fail("expected ',' or ']' after request " + std::to_string(index) + ", got " + gatehouse::Reader::describe(c));
      }
    } catch (const gatehouse::JsonError& e) {
      die({2, "request", std::string("request stream: ") + e.what()});
    }
    g_request_index = -1;
  }

 private:
  // One session on the graph: the backbone, or with `overlaid` the graph with the runner's overlay tensors. The
  // settings the load record reports (harness/ortsession.py's record) are set here.
  void create(Runner& r, bool overlaid) {
    auto t0 = Clock::now();
    Ort::SessionOptions so;
    so.SetIntraOpNumThreads(args_.threads);
    so.SetInterOpNumThreads(int(kInterOp));
    so.SetExecutionMode(ExecutionMode::ORT_SEQUENTIAL);
    so.SetGraphOptimizationLevel(GraphOptimizationLevel::ORT_ENABLE_ALL);
    if (overlaid) {
      so.SetLogSeverityLevel(ORT_LOGGING_LEVEL_INFO);
      apply_overlay(r, so);
      std::lock_guard<std::mutex> lock(ort_log_.mu);  // this session's creation alone tells which it used
      ort_log_.used.clear();
      ort_log_.removed.clear();
    }
    try {
      r.session = Ort::Session(env_, args_.graph.c_str(), so);
    } catch (const Ort::Exception& e) {
      if (overlaid)
        die({3, "load", args_.graph + ": onnxruntime cannot load this graph with the overlay " + r.overlay.path + ": " + e.what()});
      die({3, "load", args_.graph + ": onnxruntime cannot load this graph: " + e.what()});
    }
    if (overlaid) check_overlay_used(r);
    r.binding = Ort::IoBinding(r.session);
    r.session_ms = ms_since(t0);
  }

  // Every overlay tensor as an OrtValue over the mapped file (copied only when its bytes are not aligned to its
  // element size), added to the session options before the session is created.
  void apply_overlay(Runner& r, Ort::SessionOptions& so) {
    Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);
    r.values.reserve(r.overlay.tensors.size());
    for (auto& t : r.overlay.tensors) {
      unsigned char* p = r.overlay.file.data + r.overlay.data_start + t.begin;
      size_t n = size_t(t.end - t.begin);
      if (reinterpret_cast<uintptr_t>(p) % t.dtype->size != 0) {
        r.copies.emplace_back((n + 7) / 8 + 1, 0);
        std::memcpy(r.copies.back().data(), p, n);
        p = reinterpret_cast<unsigned char*>(r.copies.back().data());
        ++r.overlay.copied;
      }
      try {
        r.values.push_back(Ort::Value::CreateTensor(cpu, p, n, t.shape.data(), t.shape.size(), t.dtype->ort));
        so.AddInitializer(t.name.c_str(), r.values.back());
      } catch (const Ort::Exception& e) {
        die({3, "load", r.overlay.path + ": tensor '" + t.name + "': onnxruntime refused it: " + e.what()});
      }
    }
  }

  // ONNX Runtime applies an override only to an initializer that survives graph optimization, and ignores the
  // rest without an error: refuse any tensor it did not report using.
  void check_overlay_used(const Runner& r) {
    std::lock_guard<std::mutex> lock(ort_log_.mu);
    for (auto& t : r.overlay.tensors) {
      if (ort_log_.used.count(t.name)) continue;
      std::string why = ort_log_.removed.count(t.name)
          ? "the graph optimizer removed this initializer (folded into another constant) before overrides apply"
          : "no initializer of that name is left in the optimized graph (or this onnxruntime no longer logs "
            "'Using user supplied initializer with name (...)' at INFO)";
      die({3, "load", r.overlay.path + ": tensor '" + t.name + "': onnxruntime did not use it: " + why +
                          "; the overlay would be silently ignored"});
    }
  }

  void introspect() {
    static const std::regex past_re(R"(^past_key_values\.(\d+)\.(key|value)$)");
    Ort::Session& session_ = runners_[0]->session;
    Ort::AllocatorWithDefaultOptions alloc;
    std::map<std::string, Ort::TypeInfo> inputs;
    std::vector<std::string> found;
    for (size_t i = 0; i < session_.GetInputCount(); ++i) {
      std::string n = session_.GetInputNameAllocated(i, alloc).get();
      found.push_back(n);
      inputs.emplace(n, session_.GetInputTypeInfo(i));
    }
    std::map<std::string, Ort::TypeInfo> outputs;
    for (size_t i = 0; i < session_.GetOutputCount(); ++i) {
      std::string n = session_.GetOutputNameAllocated(i, alloc).get();
      outputs.emplace(n, session_.GetOutputTypeInfo(i));
    }
    std::vector<std::pair<std::pair<int, int>, std::string>> past;
    for (auto& n : found) {
      std::smatch m;
      if (std::regex_match(n, m, past_re)) past.push_back({{std::stoi(m[1]), m[2] == "key" ? 0 : 1}, n});
    }
    std::sort(past.begin(), past.end());
    // any other input is one the probe cannot fill: refuse at load, naming it, rather than fail mid-run
    for (auto& n : found) {
      if (n == "input_ids" || n == "attention_mask" || n == "position_ids" || std::regex_match(n, past_re)) continue;
      die({3, "load", args_.graph + ": cannot bind input " + n + " (a decoder graph takes input_ids, attention_mask, "
                          "optional position_ids and past_key_values.N.key/value)"});
    }
    std::vector<std::string> missing;
    for (const char* need : {"input_ids", "attention_mask"})
      if (!inputs.count(need)) missing.push_back(need);
    if (past.empty()) missing.push_back("past_key_values.*");
    if (!outputs.count("logits")) missing.push_back("output logits");
    if (!missing.empty()) {
      std::string m;
      for (auto& s : missing) m += (m.empty() ? "" : ", ") + s;
      std::string have;
      for (auto& s : found) have += (have.empty() ? "" : ", ") + s;
      die({3, "load", args_.graph + ": graph lacks the expected inputs/outputs [" + m + "] (inputs: " + have + ")"});
    }
    has_positions_ = inputs.count("position_ids") > 0;
    for (size_t i = 0; i < past.size(); ++i) {
      int layer = int(i / 2), kind = int(i % 2);
      if (past[i].first != std::make_pair(layer, kind))
        die({3, "load", args_.graph + ": past_key_values inputs are not key/value pairs for layers 0.." +
                            std::to_string(past.size() / 2 - 1) + " (at " + past[i].second + ")"});
      std::string pn = past[i].second;
      std::string on = "present" + pn.substr(std::strlen("past_key_values"));
      if (!outputs.count(on)) die({3, "load", args_.graph + ": graph lacks the output " + on + " for input " + pn});
      past_names_.push_back(pn);
      present_names_.push_back(on);
    }
    auto kv = inputs.at(past_names_[0]).GetTensorTypeAndShapeInfo();
    auto shape = kv.GetShape();
    if (shape.size() == 4 && shape[1] <= 0 && args_.kv_heads > 0) shape[1] = args_.kv_heads;
    if (shape.size() == 4 && shape[3] <= 0 && args_.head_dim > 0) shape[3] = args_.head_dim;
    if (shape.size() == 4 && ((args_.kv_heads > 0 && shape[1] != args_.kv_heads) || (args_.head_dim > 0 && shape[3] != args_.head_dim)))
      die({3, "load", args_.graph + ": " + past_names_[0] + " has kv_heads " + std::to_string(shape[1]) + ", head_dim " +
                          std::to_string(shape[3]) + ", unlike --kv-heads/--head-dim"});
    if (shape.size() != 4 || shape[1] <= 0 || shape[3] <= 0)
      die({3, "load", args_.graph + ": " + past_names_[0] + " must be (batch, kv_heads, sequence, head_dim) with static heads "
                          "and head_dim (or pass --kv-heads/--head-dim)"});
    if (kv.GetElementType() != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
      die({3, "load", args_.graph + ": " + past_names_[0] + " is " + type_name(kv.GetElementType()) +
                          "; the probe binds float32 caches only"});
    kv_heads_ = shape[1];
    head_dim_ = shape[3];
    auto lg = outputs.at("logits").GetTensorTypeAndShapeInfo();
    auto ls = lg.GetShape();
    if (ls.size() != 3 || ls[2] <= 0)
      die({3, "load", args_.graph + ": logits must be (batch, sequence, vocab) with a static vocab"});
    if (lg.GetElementType() != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
      die({3, "load", args_.graph + ": logits are " + type_name(lg.GetElementType()) + "; the probe reads float32"});
    vocab_ = ls[2];
    auto int_type = [&](const char* name) {
      auto t = inputs.at(name).GetTensorTypeAndShapeInfo().GetElementType();
      if (t != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 && t != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32)
        die({3, "load", args_.graph + ": input " + name + " is " + type_name(t) + "; expected int64 or int32"});
      return t;
    };
    ids_.type = int_type("input_ids");
    mask_.type = int_type("attention_mask");
    if (has_positions_) pos_.type = int_type("position_ids");
    kv_mode_ = args_.kv;
    if (kv_mode_ == "auto") {
      // A graph may say how its cache binds (Gatehouse's fused export writes gatehouse.kv = share);
      // otherwise: graphs without position_ids are ORT-GenAI's GroupQueryAttention graphs.
      std::string declared;
      Ort::ModelMetadata md = session_.GetModelMetadata();
      Ort::AllocatedStringPtr v = md.LookupCustomMetadataMapAllocated("gatehouse.kv", alloc);
      if (v) declared = v.get();
      if (!declared.empty() && declared != "share" && declared != "concat")
        die({3, "load", args_.graph + ": metadata gatehouse.kv is '" + declared + "'; expected share or concat"});
      kv_mode_ = !declared.empty() ? declared : has_positions_ ? "concat" : "share";
    }
  }

  void allocate() {
    size_t per = size_t(kv_heads_) * size_t(args_.max_seq) * size_t(head_dim_);
    int copies = kv_mode_ == "concat" ? 2 : 1;
    kv_.assign(past_names_.size() * copies, std::vector<float>());
    for (auto& b : kv_) b.assign(per, 0.0f);
    kv_bytes_ = kv_.size() * per * sizeof(float);
    ids_.resize(args_.max_seq);
    mask_.resize(args_.max_seq);
    for (long i = 0; i < args_.max_seq; ++i) mask_.set(i, 1);
    pos_.resize(args_.max_seq);
    logits_.assign(size_t(vocab_), 0.0f);
  }

  long integer_field(const Json& req, const char* key, bool required, long fallback) {
    const Json* v = req.get(key);
    if (!v) {
      if (required) die({2, "request", std::string("request ") + std::to_string(g_request_index) + ": missing field " + key});
      return fallback;
    }
    if (v->kind != Json::Number || !v->integral)
      die({2, "request", std::string("request ") + std::to_string(g_request_index) + ": " + key + " must be an integer"});
    return long(v->num);
  }

  std::vector<int64_t> id_list(const Json& req, const char* key, bool required) {
    const Json* v = req.get(key);
    std::vector<int64_t> out;
    std::string where = std::string("request ") + std::to_string(g_request_index) + ": " + key;
    if (!v) {
      if (required) die({2, "request", where + " is missing"});
      return out;
    }
    if (v->kind != Json::Array) die({2, "request", where + " must be an array of token ids"});
    for (size_t i = 0; i < v->arr.size(); ++i) {
      const Json& t = v->arr[i];
      if (t.kind != Json::Number || !t.integral)
        die({2, "request", where + "[" + std::to_string(i) + "] is not an integer"});
      if (t.num < 0 || t.num >= double(vocab_))
        die({2, "request", where + "[" + std::to_string(i) + "] = " + gatehouse::dump(t) + " is out of range [0, " +
                               std::to_string(vocab_) + ")"});
      out.push_back(int64_t(t.num));
    }
    return out;
  }

  void handle(const Json& req, long index) {
    if (req.kind != Json::Object) die({2, "request", "request " + std::to_string(index) + " is not a JSON object"});
    if (const Json* id = req.get("id")) g_request_id = gatehouse::dump(*id);
    std::vector<int64_t> prompt = id_list(req, "prompt_ids", true);
    std::vector<int64_t> stop = id_list(req, "stop_ids", false);
    if (prompt.empty()) die({2, "request", "request " + std::to_string(index) + ": prompt_ids is empty"});
    long max_new = integer_field(req, "max_new_tokens", true, 0);
    if (max_new < 1) die({2, "request", "request " + std::to_string(index) + ": max_new_tokens must be at least 1"});
    std::string mode = "greedy";
    if (const Json* m = req.get("mode")) {
      if (m->kind != Json::String) die({2, "request", "request " + std::to_string(index) + ": mode must be a string"});
      mode = m->str;
    }
    if (mode != "greedy")
      die({2, "request", "request " + std::to_string(index) + ": mode '" + mode + "' is not supported (greedy only)"});
    long threads = integer_field(req, "threads", false, args_.threads);
    if (threads != args_.threads)
      die({2, "request", "request " + std::to_string(index) + ": threads " + std::to_string(threads) +
                             " differs from the loaded session's " + std::to_string(args_.threads)});
    bool want_phi = false;
    if (const Json* ph = req.get("phi")) {
      if (ph->kind != Json::Bool) die({2, "request", "request " + std::to_string(index) + ": phi must be true or false"});
      want_phi = ph->b;
    }
    if (want_phi && subspaces_.empty())
      die({2, "request", "request " + std::to_string(index) + ": phi is routing's feature; load bundles with --bundle"});
    long total = long(prompt.size()) + max_new;
    if (total > args_.max_seq)
      die({2, "request", "request " + std::to_string(index) + ": prompt (" + std::to_string(prompt.size()) +
                             ") + max_new_tokens (" + std::to_string(max_new) + ") exceeds --max-seq " +
                             std::to_string(args_.max_seq)});
    try {
      generate(prompt, max_new, stop, total, index, want_phi);
    } catch (const Ort::Exception& e) {
      die({4, "run", "request " + std::to_string(index) + ": onnxruntime failed: " + e.what()});
    }
  }

  // One forward call: `n` new tokens at positions [past, past + n), written into ids_/pos_ by the caller.
  // share mode: the cache tensors keep their shape for a whole request, so they are bound once per
  // request (IoBinding replaces a name's binding; only ids, mask and logits are rebound per step).
  void bind_shared_cache(long capacity) {
    size_t per = size_t(kv_heads_) * size_t(head_dim_);
    shared_kv_.clear();
    shared_kv_.reserve(past_names_.size());
    std::vector<int64_t> s{1, kv_heads_, capacity, head_dim_};
    for (size_t i = 0; i < past_names_.size(); ++i) {
      shared_kv_.push_back(Ort::Value::CreateTensor<float>(mem_, kv_[i].data(), per * size_t(capacity), s.data(), 4));
      active_->binding.BindInput(past_names_[i].c_str(), shared_kv_.back());
      active_->binding.BindOutput(present_names_[i].c_str(), shared_kv_.back());
    }
  }

  int64_t step(long past, long n, long capacity) {
    Ort::IoBinding& binding_ = active_->binding;
    if (kv_mode_ == "concat") {
      binding_.ClearBoundInputs();
      binding_.ClearBoundOutputs();
    } else if (past == 0) {
      bind_shared_cache(capacity);
    }
    std::vector<Ort::Value>& keep = step_values_;
    keep.clear();
    keep.reserve(4 + 2 * past_names_.size());
    std::vector<int64_t> tok_shape{1, n};
    keep.push_back(ids_.view(mem_, size_t(past), tok_shape, size_t(n)));
    binding_.BindInput("input_ids", keep.back());
    std::vector<int64_t> mask_shape{1, past + n};
    keep.push_back(mask_.view(mem_, 0, mask_shape, size_t(past + n)));
    binding_.BindInput("attention_mask", keep.back());
    if (has_positions_) {
      keep.push_back(pos_.view(mem_, size_t(past), tok_shape, size_t(n)));
      binding_.BindInput("position_ids", keep.back());
    }
    size_t per = size_t(kv_heads_) * size_t(head_dim_);
    for (size_t i = 0; i < past_names_.size() && kv_mode_ == "concat"; ++i) {
      {
        float* src = kv_[2 * i + cur_].data();
        float* dst = kv_[2 * i + 1 - cur_].data();
        std::vector<int64_t> ps{1, kv_heads_, past, head_dim_}, os{1, kv_heads_, past + n, head_dim_};
        keep.push_back(Ort::Value::CreateTensor<float>(mem_, src, per * size_t(past), ps.data(), 4));
        binding_.BindInput(past_names_[i].c_str(), keep.back());
        keep.push_back(Ort::Value::CreateTensor<float>(mem_, dst, per * size_t(past + n), os.data(), 4));
        binding_.BindOutput(present_names_[i].c_str(), keep.back());
      }
    }
    if (size_t(n) * size_t(vocab_) > logits_.size()) logits_.assign(size_t(n) * size_t(vocab_), 0.0f);  // prompt-sized, once
    std::vector<int64_t> ls{1, n, vocab_};
    keep.push_back(Ort::Value::CreateTensor<float>(mem_, logits_.data(), size_t(n) * size_t(vocab_), ls.data(), 3));
    binding_.BindOutput("logits", keep.back());
    active_->session.Run(run_options_, binding_);
    if (kv_mode_ == "concat") cur_ = 1 - cur_;
    const float* row = logits_.data() + size_t(n - 1) * size_t(vocab_);
    return int64_t(std::max_element(row, row + vocab_) - row);
  }

  // Routing (--bundle): a prefill of the prompt on the backbone, φ from its present.L.value, the argmin.
  Choice route(const std::vector<int64_t>& prompt, long capacity) {
    Choice c;
    auto t0 = Clock::now();
    active_ = runners_[0].get();
    cur_ = 0;
    long n = long(prompt.size());
    for (long i = 0; i < n; ++i) { ids_.set(size_t(i), prompt[size_t(i)]); pos_.set(size_t(i), i); }
    step(0, n, capacity);
    c.prefill_ms = ms_since(t0);
    auto t1 = Clock::now();
    const size_t value = size_t(2 * route_layer_ + 1);  // past_names_ runs key, value per layer
    // concat: the present written this step is the buffer cur_ now points at, (1, heads, n, head_dim); share: the
    // one buffer, (1, heads, capacity, head_dim)
    const float* v = kv_mode_ == "concat" ? kv_[2 * value + size_t(cur_)].data() : kv_[value].data();
    c.phi = gatehouse::phi_of_values(v, kv_heads_, kv_mode_ == "concat" ? n : capacity, n, head_dim_);
    c.phi_ms = ms_since(t1);
    auto t2 = Clock::now();
    c.subspace = gatehouse::argmin(c.phi, subspaces_, &c.errors);
    c.choose_ms = ms_since(t2);
    c.route_ms = ms_since(t0);
    active_ = runners_[subspaces_[c.subspace].runner].get();
    return c;
  }

  std::string route_record(const Choice& c, bool want_phi) const {
    const Runner& chosen = *active_;
    std::string errors = "{";
    for (size_t i = 0; i < subspaces_.size(); ++i)
      errors += (i ? "," : "") + gatehouse::quote(subspaces_[i].name) + ":" + gatehouse::real(c.errors[i]);
    Obj o;
    o.raw("bundle", chosen.skill.empty() ? "null" : gatehouse::quote(chosen.skill))
        .str("subspace", subspaces_[c.subspace].name).raw("errors", errors + "}").num("prefill_ms", c.prefill_ms)
        .num("phi_ms", c.phi_ms).num("choose_ms", c.choose_ms).num("route_ms", c.route_ms);
    if (want_phi) {
      std::string phi = "[";
      for (size_t i = 0; i < c.phi.size(); ++i) phi += (i ? "," : "") + gatehouse::real(c.phi[i]);
      o.raw("phi", phi + "]");
    }
    return o.done();
  }

  void generate(const std::vector<int64_t>& prompt, long max_new, const std::vector<int64_t>& stop, long capacity,
                long index, bool want_phi) {
    const bool routed = !subspaces_.empty();
    Choice choice;
    if (routed) choice = route(prompt, capacity);
    auto t0 = Clock::now();
    cur_ = 0;
    long n = long(prompt.size());
    for (long i = 0; i < n; ++i) { ids_.set(size_t(i), prompt[size_t(i)]); pos_.set(size_t(i), i); }
    std::vector<int64_t> out;
    std::vector<double> stamps;
    int64_t tok = step(0, n, capacity);
    out.push_back(tok);
    stamps.push_back(ms_since(t0));
    long past = n;
    while (long(out.size()) < max_new && std::find(stop.begin(), stop.end(), tok) == stop.end()) {
      ids_.set(size_t(past), tok);
      pos_.set(size_t(past), past);
      tok = step(past, 1, capacity);
      past += 1;
      out.push_back(tok);
      stamps.push_back(ms_since(t0));
    }
    double total = ms_since(t0);
    Obj o;
    o.raw("id", g_request_id).integer("index", index).integer("prompt_tokens", n)
        .integer("generated_tokens", long(out.size())).num("prefill_ms", stamps.front())
        .num("decode_ms", stamps.back() - stamps.front()).integer("decode_tokens", long(out.size()) - 1)
        .num("total_ms", total).ints("generated_ids", out).nums("token_ms", stamps);
    if (routed) o.raw("route", route_record(choice, want_phi));
    std::fprintf(stdout, "%s\n", o.done().c_str());
    std::fflush(stdout);
  }

  Args args_;
  // the log and the environment outlive the sessions (declared first: destroyed last)
  OrtLog ort_log_;
  Ort::Env env_{nullptr};
  std::vector<std::unique_ptr<Runner>> runners_;  // [0]: the backbone (or the --overlay graph); then one per bundle
  Runner* active_ = nullptr;                      // the session a step runs on
  std::vector<gatehouse::Subspace> subspaces_;    // every bundle's, in routing order (empty: no routing)
  long route_layer_ = 0;
  Ort::RunOptions run_options_;
  Ort::MemoryInfo mem_;
  std::string sha256_, kv_mode_;
  std::vector<std::string> past_names_, present_names_;
  bool has_positions_ = false;
  int64_t kv_heads_ = 0, head_dim_ = 0, vocab_ = 0;
  std::vector<std::vector<float>> kv_;
  size_t kv_bytes_ = 0;
  int cur_ = 0;
  IntBuffer ids_, mask_, pos_;
  std::vector<float> logits_;
  std::vector<Ort::Value> shared_kv_, step_values_;
};

}  // namespace

int main(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  try {
    Probe p(args);
    p.load();
    p.serve();
  } catch (const Ort::Exception& e) {
    die({4, "run", std::string("onnxruntime: ") + e.what()});
  } catch (const std::exception& e) {
    die({4, "run", std::string("unexpected: ") + e.what()});
  }
  return 0;
}
