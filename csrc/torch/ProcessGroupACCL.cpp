// accl._accl_torch: the torch.distributed backend "accl", a c10d::Backend over the accl C API.
//
// Every operation is checked on the calling thread (bad arguments raise at once, as on gloo),
// then queued to the process group's one worker thread, which makes the accl calls in FIFO order.
// So async_op=True returns at once, and every rank issues its accl calls in the order the program
// made them, which accl's matching by call order requires. Only c10d APIs that have been stable
// for many releases are used, so the same source builds against several torch versions; the
// module is still built for exactly one (see accl_torch_built_for below).
//
// Data movement (broadcast, gathers, scatters, all-to-all, send/recv) travels as bytes, so every
// dtype moves. Reductions map the dtype to an accl type; what accl cannot reduce (bitwise ops,
// int16/uint16) is gathered and folded on the host; what has no defined meaning raises.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <ATen/core/ivalue.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "accl/accl.h"

// The torch this module was compiled against. accl.distributed reads it from the file before
// loading the module, because a module built for another torch may not even load.
extern "C" __attribute__((used, visibility("default")))
const char accl_torch_built_for[] = "accl-torch-built-for:" ACCL_TORCH_VERSION ";";

namespace accl_torch {
namespace {

using c10d::OpType;
using c10d::ReduceOp;
using Tensors = std::vector<at::Tensor>;

[[noreturn]] void fail(const std::string& msg) { C10_THROW_ERROR(DistBackendError, msg); }

std::exception_ptr errorPtr(const std::string& msg) {
  try {
    fail(msg);
  } catch (...) {
    return std::current_exception();
  }
}

// An accl call failed: its message already names the op, sequence number and missing ranks.
void check(acclResult_t r, const char* call) {
  if (r == acclSuccess) return;
  std::string msg = acclGetLastError(nullptr);  // names the call, its sequence number, the ranks
  if (msg.empty()) msg = std::string(call) + " failed";
  // Say which timeout it was, and where to set it.
  if (r == acclTimeout)
    msg += " (the process group timeout of init_process_group/new_group, or set_timeout)";
  fail("accl: " + msg);
}

void* ptr(const at::Tensor& t) { return t.data_ptr(); }
size_t bytes(const at::Tensor& t) { return t.numel() * t.element_size(); }
// A contiguous tensor's bytes, as a flat uint8 view.
at::Tensor asBytes(const at::Tensor& t) { return t.view({-1}).view(at::kByte); }

// Accelerator device types this process serves, and the accl backend for each ("cuda" ->
// "nccl"); set once from Python (accl.distributed) before any group exists.
std::map<c10::DeviceType, std::string>& accelBackends() {
  static std::map<c10::DeviceType, std::string> m;
  return m;
}

void checkTensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "accl ", op, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu() || accelBackends().count(t.device().type()), "accl ", op,
              ": no accl backend serves ", t.device().str(), " tensors in this process (",
              "served: cpu", [] {
                std::string s;
                for (auto& [type, name] : accelBackends())
                  s += ", " + c10::DeviceTypeName(type, true) + " (" + name + ")";
                return s;
              }(), ")");
  TORCH_CHECK(t.layout() == at::kStrided, "accl ", op, ": only dense tensors are supported");
}

void checkOne(const Tensors& ts, const char* op) {
  TORCH_CHECK(ts.size() == 1, "accl ", op, ": expected one tensor per process, got ", ts.size());
  checkTensor(ts[0], op);
}

void checkSame(const at::Tensor& t, const at::Tensor& like, int64_t numel, const char* op) {
  checkTensor(t, op);
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "accl ", op, ": dtype ", t.scalar_type(),
              " differs from ", like.scalar_type());
  TORCH_CHECK(t.numel() == numel, "accl ", op, ": expected a tensor of ", numel,
              " elements, got ", t.numel());
}

// A contiguous tensor to hand to accl, and the copy back into the caller's tensor if it was not
// contiguous itself.
at::Tensor staged(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
void writeBack(const at::Tensor& user, const at::Tensor& buf) {
  if (!user.is_same(buf)) user.copy_(buf.view(user.sizes()));
}

// How a (dtype, op) pair is reduced.
struct Red {
  acclDataType_t type = acclFloat32;
  acclRedOp_t op = acclSum;
  int64_t mult = 1;   // accl elements per torch element: 2 for complex (pairs of reals)
  bool host = false;  // gather and fold on the host with `hostOp`
  ReduceOp::RedOpType hostOp = ReduceOp::SUM;
  ReduceOp premul;    // PREMUL_SUM: its factor is applied before summing
  bool isPremul = false;
};

const char* opName(ReduceOp::RedOpType op) {
  switch (op) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::PRODUCT: return "PRODUCT";
    case ReduceOp::MIN: return "MIN";
    case ReduceOp::MAX: return "MAX";
    case ReduceOp::BAND: return "BAND";
    case ReduceOp::BOR: return "BOR";
    case ReduceOp::BXOR: return "BXOR";
    case ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

bool acclType(at::ScalarType st, acclDataType_t* out) {
  switch (st) {
    case at::kFloat: *out = acclFloat32; return true;
    case at::kDouble: *out = acclFloat64; return true;
    case at::kHalf: *out = acclFloat16; return true;
    case at::kBFloat16: *out = acclBfloat16; return true;
    case at::kChar: *out = acclInt8; return true;
    case at::kByte: *out = acclUint8; return true;
    case at::kInt: *out = acclInt32; return true;
    case at::kLong: *out = acclInt64; return true;
    case at::kUInt32: *out = acclUint32; return true;
    case at::kUInt64: *out = acclUint64; return true;
    case at::kFloat8_e4m3fn: *out = acclFloat8e4m3; return true;
    case at::kFloat8_e5m2: *out = acclFloat8e5m2; return true;
    default: return false;
  }
}

Red reduction(at::ScalarType st, const ReduceOp& rop, const char* call) {
  Red r;
  auto op = rop.op_;
  auto bad = [&](const char* why) {
    TORCH_CHECK(false, "accl ", call, ": ReduceOp.", opName(op), " is not supported for ", st,
                " tensors", why);
  };
  if (op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR) {
    if (!at::isIntegralType(st, /*includeBool=*/true))
      bad(" (bitwise ops take integer and bool tensors)");
    r.host = true;
    r.hostOp = op;
    return r;
  }
  if (op == ReduceOp::PREMUL_SUM) {
    if (!at::isFloatingType(st) && !at::isComplexType(st))
      bad(" (PREMUL_SUM takes floating-point and complex tensors)");
    TORCH_CHECK(rop.supplement_, "accl ", call, ": PREMUL_SUM without a factor");
    r.premul = rop;
    r.isPremul = true;
    op = ReduceOp::SUM;
  }
  if (st == at::kBool) {
    // As accl's Python API and gloo: SUM is logical or, PRODUCT logical and.
    if (op == ReduceOp::AVG) bad(" (bool has no average)");
    r.type = acclUint8;
    r.op = (op == ReduceOp::SUM || op == ReduceOp::MAX) ? acclMax : acclMin;
    return r;
  }
  at::ScalarType real = st;
  if (at::isComplexType(st)) {
    // A complex sum or average is the sum or average of the real and imaginary parts.
    if (op != ReduceOp::SUM && op != ReduceOp::AVG)
      bad(" (complex tensors take SUM, AVG and PREMUL_SUM)");
    real = c10::toRealValueType(st);
    r.mult = 2;
  }
  switch (op) {
    case ReduceOp::SUM: r.op = acclSum; break;
    case ReduceOp::AVG: r.op = acclAvg; break;
    case ReduceOp::PRODUCT: r.op = acclProd; break;
    case ReduceOp::MIN: r.op = acclMin; break;
    case ReduceOp::MAX: r.op = acclMax; break;
    default: bad("");
  }
  if (!acclType(real, &r.type)) {
    if (st == at::kShort || st == at::kUInt16) {
      r.host = true;  // accl has no 16-bit integers
      r.hostOp = op;
      r.mult = 1;
      return r;
    }
    bad(" (no accl type for it)");
  }
  return r;
}

// PREMUL_SUM: buf *= factor, before the sum.
void applyPremul(const Red& red, at::Tensor& buf) {
  if (!red.isPremul) return;
  auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(red.premul.supplement_.get());
  TORCH_CHECK(s, "accl: PREMUL_SUM with an unknown supplement");
  if (s->tensor_factor.defined())
    buf.mul_(s->tensor_factor.to(buf.device()).reshape({}));
  else
    buf.mul_(s->double_factor);
}

// Reduces `all` (one row per rank) on the host into its first row.
at::Tensor hostFold(const at::Tensor& all, const Red& red, int size) {
  at::Tensor acc = all[0].clone();
  for (int r = 1; r < size; ++r) {
    const at::Tensor& x = all[r];
    switch (red.hostOp) {
      case ReduceOp::BAND: acc.bitwise_and_(x); break;
      case ReduceOp::BOR: acc.bitwise_or_(x); break;
      case ReduceOp::BXOR: acc.bitwise_xor_(x); break;
      case ReduceOp::SUM: case ReduceOp::AVG: acc.add_(x); break;
      case ReduceOp::PRODUCT: acc.mul_(x); break;
      case ReduceOp::MIN: acc = at::minimum(acc, x); break;
      case ReduceOp::MAX: acc = at::maximum(acc, x); break;
      default: fail("accl: unexpected host reduction");
    }
  }
  if (red.hostOp == ReduceOp::AVG) acc.div_(size, "trunc");  // as accl: integer division
  return acc;
}

// Where a job's accl calls go: the communicator for its tensors' device and, for an
// accelerator, the stream they run on (nullptr for cpu).
struct Ctx {
  acclComm_t comm;
  void* stream;
};

// One unit of work on the worker thread. `run` issues the accl calls (inside a group, they only
// queue); `post` runs once the data has arrived (copies out of staging buffers, host folds).
// For an accelerator both run on the communicator's stream, so their tensor operations are
// ordered with the accl calls.
struct Job {
  std::function<void(const Ctx&)> run;
  std::function<void()> post;
};

// The future holds the output tensors, as gloo's: a list of tensors, or a list of lists when an
// op has several output lists.
c10::intrusive_ptr<c10::ivalue::Future> makeFuture(size_t lists) {
  auto list = c10::ListType::create(c10::TensorType::get());
  return c10::make_intrusive<c10::ivalue::Future>(lists > 1 ? c10::ListType::create(list) : list);
}

class WorkACCL : public c10d::Work {
 public:
  WorkACCL(int rank, OpType type, uint64_t seq, std::vector<Tensors> outputs)
      : c10d::Work(rank, type),
        seq_(seq),
        outputs_(std::move(outputs)),
        future_(makeFuture(outputs_.size())) {}

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return seq_; }
  // recvAnysource: the rank the message came from, once it has arrived (-1 before).
  int sourceRank() const override { return source_ ? source_->load() : -1; }
  void setSource(std::shared_ptr<std::atomic<int>> s) { source_ = std::move(s); }
  Tensors result() override { return outputs_.empty() ? Tensors() : outputs_[0]; }

  // Called once, on the worker thread. Future callbacks (DDP comm hooks) run here.
  void complete(const std::exception_ptr& error) {
    if (error) {
      future_->setError(error);
      finish(error);
      return;
    }
    if (outputs_.size() > 1)
      future_->markCompleted(c10::IValue(outputs_));
    else
      future_->markCompleted(c10::IValue(outputs_.empty() ? Tensors() : outputs_[0]));
    finish();
  }

 private:
  uint64_t seq_;
  std::shared_ptr<std::atomic<int>> source_;
  std::vector<Tensors> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

class ProcessGroupACCL : public c10d::Backend {
 public:
  // `store` is the group's c10d store: the accelerator communicator's unique id travels
  // through it when the first accelerator tensor arrives.
  // `anySource`: every send announces itself in the store, so that recvAnysource can work (see
  // recvAnysource); all ranks of the group must pass the same value.
  ProcessGroupACCL(const std::string& uid, int rank, int size, double timeoutSeconds,
                   c10::intrusive_ptr<c10d::Store> store, bool anySource = false)
      : c10d::Backend(rank, size), store_(std::move(store)), anySource_(anySource) {
    TORCH_CHECK(uid.size() == ACCL_UNIQUE_ID_BYTES, "accl: the unique id must be ",
                ACCL_UNIQUE_ID_BYTES, " bytes, got ", uid.size());
    acclUniqueId id;
    memcpy(id.internal, uid.data(), sizeof(id.internal));
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.timeout = timeoutSeconds;  // the process group's timeout bounds every accl call
    cfg.backend = "cpu";           // for cpu tensors; accelerator tensors get their own (accel)
    check(acclCommInitRankConfig(&comm_, size, id, rank, &cfg), "acclCommInitRankConfig");
    timeout_ = timeoutSeconds;
    worker_ = std::thread([this] { loop(); });
  }

  // A group over a communicator made by acclCommSplit (see split), which it now owns. It has no
  // store, so it serves cpu tensors only.
  ProcessGroupACCL(acclComm_t comm, int rank, int size, double timeoutSeconds)
      : c10d::Backend(rank, size), comm_(comm), timeout_(timeoutSeconds) {
    worker_ = std::thread([this] { loop(); });
  }

  ~ProcessGroupACCL() override { shutdown(); }

  template <typename... Args>
  static c10::intrusive_ptr<ProcessGroupACCL> create(Args&&... args) {
    auto pg = c10::make_intrusive<ProcessGroupACCL>(std::forward<Args>(args)...);
    std::lock_guard<std::mutex> lock(liveMutex());
    std::erase_if(live(), [](const auto& w) { return w.expired(); });
    live().emplace_back(pg);
    return pg;
  }

  // Shuts down every process group still alive; accl.distributed calls it at interpreter exit,
  // before finalization. A worker may drop the last reference to a tensor that has a Python
  // object, which takes the GIL; a thread that asks for the GIL during finalization is ended
  // in the middle of a destructor, and that aborts the process.
  static void closeAll() {
    std::vector<c10::intrusive_ptr<ProcessGroupACCL>> groups;
    {
      std::lock_guard<std::mutex> lock(liveMutex());
      for (auto& w : live())
        if (auto pg = w.lock()) groups.push_back(std::move(pg));
    }
    for (auto& pg : groups) pg->shutdown();
  }

  const std::string getBackendName() const override { return "accl"; }
  bool supportsCoalescing() const override { return true; }
  bool supportsSplitting() const override { return true; }

  // What ProcessGroup::splitGroup starts from when it is given no options.
  c10::intrusive_ptr<Options> getBackendOptions() override {
    return c10::make_intrusive<Options>(
        "accl", std::chrono::milliseconds(int64_t(timeout_.load() * 1000)));
  }

  // ProcessGroup.split_group: one acclCommSplit over this group, run on the worker thread in
  // program order like every other collective. Every rank of this group must call it; `ranks`
  // (sorted ranks of this group) are the new group's members, the others get nullptr. Splits
  // made at the same time do not overlap, so their smallest rank tells them apart as the color.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>&,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override {
    auto it = std::find(ranks.begin(), ranks.end(), getRank());
    bool member = it != ranks.end();
    int color = member ? *std::min_element(ranks.begin(), ranks.end()) : ACCL_SPLIT_NOCOLOR;
    double timeout = opts ? opts->timeout.count() / 1000.0 : timeout_.load();
    auto made = std::make_shared<acclComm_t>(nullptr);
    Job job{[=, this](const Ctx& c) {
              acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
              cfg.timeout = timeout;
              cfg.backend = "cpu";
              check(acclCommSplit(c.comm, color, getRank(), made.get(), &cfg), "acclCommSplit");
            },
            nullptr};
    auto work = enqueue(OpType::UNKNOWN, {}, {job});
    if (Py_IsInitialized() && PyGILState_Check()) {
      // The worker may need the GIL to finish earlier ops (see close()): let go of it.
      pybind11::gil_scoped_release nogil;
      work->wait();
    } else {
      work->wait();
    }
    if (!member) return nullptr;
    return create(*made, int(it - ranks.begin()), int(ranks.size()), timeout);
  }

  // Ops issued after this run under the new timeout. It reaches the communicators on the
  // worker, in program order (acclCommSetTimeout must not race a call on the same
  // communicator); an accelerator communicator made later starts with it.
  void setTimeout(std::chrono::milliseconds timeout) override {
    TORCH_CHECK(timeout.count() > 0, "accl setTimeout: the timeout must be positive, got ",
                timeout.count(), " ms");
    double seconds = timeout.count() / 1000.0;
    timeout_ = seconds;
    Job job{[this, seconds](const Ctx& c) {
              check(acclCommSetTimeout(c.comm, seconds), "acclCommSetTimeout");
              if (accel_) check(acclCommSetTimeout(accel_->comm, seconds), "acclCommSetTimeout");
            },
            nullptr};
    // Not a collective: no sequence number. A failure (a broken communicator) shows in the
    // next op, which fails with the earlier error.
    push(Entry{{job},
               {c10::make_intrusive<WorkACCL>(getRank(), OpType::UNKNOWN, 0,
                                              std::vector<Tensors>{})},
               false,
               c10::Device(c10::kCPU),
               {}});
  }

  // The communicator's error state: a timeout, a dead or failed peer, or another error that
  // left it unusable (then every later op fails with it).
  c10d::ErrorType getError() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return c10d::ErrorType::COMM_ERROR;
    if (closed_) return c10d::ErrorType::SUCCESS;  // shut down cleanly: comm_ is freed
    acclResult_t err = acclSuccess;
    check(acclCommGetAsyncError(comm_, &err), "acclCommGetAsyncError");
    switch (err) {
      case acclSuccess:
      case acclInProgress: return c10d::ErrorType::SUCCESS;
      case acclTimeout: return c10d::ErrorType::TIMEOUT;
      case acclRemoteError: return c10d::ErrorType::REMOTE_ERROR;
      default: return c10d::ErrorType::COMM_ERROR;
    }
  }

  // ------------------------------------------------------------ collectives

  c10::intrusive_ptr<c10d::Work> allreduce(Tensors& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    if (tensors.size() == 1 && tensors[0].defined() && tensors[0].layout() == at::kSparse)
      return enqueue(OpType::ALLREDUCE, {tensors},
                     {sparseAllreduceJob(tensors[0], opts.reduceOp)});
    checkOne(tensors, "allreduce");
    return enqueue(OpType::ALLREDUCE, {tensors}, {allreduceJob(tensors[0], opts.reduceOp)});
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    std::vector<Job> jobs;
    for (auto& t : tensors) {
      checkTensor(t, "allreduce_coalesced");
      jobs.push_back(allreduceJob(t, opts.reduceOp));
    }
    return enqueue(OpType::ALLREDUCE_COALESCED, {tensors}, std::move(jobs), true);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(Tensors& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    checkOne(tensors, "broadcast");
    int root = checkRoot(opts.rootRank, "broadcast");
    at::Tensor t = tensors[0];
    auto buf = std::make_shared<at::Tensor>();
    Job job{[=, this](const Ctx& c) {
              *buf = staged(t);
              check(acclBroadcast(ptr(*buf), ptr(*buf), bytes(t), acclUint8, root, c.comm, c.stream),
                    "acclBroadcast");
            },
            [=] { writeBack(t, *buf); }};
    return enqueue(OpType::BROADCAST, {tensors}, {job});
  }

  c10::intrusive_ptr<c10d::Work> reduce(Tensors& tensors,
                                        const c10d::ReduceOptions& opts) override {
    checkOne(tensors, "reduce");
    int root = checkRoot(opts.rootRank, "reduce");
    at::Tensor t = tensors[0];
    Red red = reduction(t.scalar_type(), opts.reduceOp, "reduce");
    auto buf = std::make_shared<at::Tensor>();
    auto all = std::make_shared<at::Tensor>();
    int size = getSize(), rank = getRank();
    Job job{[=, this](const Ctx& c) {
              // PREMUL_SUM scales a private copy: off the root the tensor must stay as it was.
              *buf = red.isPremul ? t.contiguous().clone() : staged(t);
              applyPremul(red, *buf);
              if (red.host) {
                *all = at::empty({size, t.numel()}, t.options());
                check(acclAllGather(ptr(*buf), ptr(*all), bytes(t), acclUint8, c.comm, c.stream),
                      "acclAllGather");
              } else {
                check(acclReduce(ptr(*buf), ptr(*buf), t.numel() * red.mult, red.type, red.op,
                                 root, c.comm, c.stream),
                      "acclReduce");
              }
            },
            [=] {
              if (rank != root) return;
              if (red.host) buf->copy_(hostFold(*all, red, size).view(buf->sizes()));
              writeBack(t, *buf);
            }};
    return enqueue(OpType::REDUCE, {tensors}, {job});
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                           const c10d::AllgatherOptions&) override {
    checkOne(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1, "accl allgather: expected one list of output tensors");
    return enqueue(OpType::ALLGATHER, outputs, {allgatherJob(outputs[0], inputs[0], "allgather")},
                   false, inputs);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions&) override {
    return enqueue(OpType::_ALLGATHER_BASE, {{out}}, {allgatherBaseJob(out, in)}, false, {in});
  }

  // Deprecated in torch (all_gather_coalesced), kept for old callers: outputs[r][i] receives
  // rank r's inputs[i]. One allgather per input, all in one accl group.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<Tensors>& outputs,
                                                     Tensors& inputs,
                                                     const c10d::AllgatherOptions&) override {
    const char* op = "allgather_coalesced";
    TORCH_CHECK(outputs.size() == size_t(getSize()), "accl ", op, ": expected ", getSize(),
                " output lists (one per rank), got ", outputs.size());
    std::vector<Job> jobs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensors outs;
      for (auto& list : outputs) {
        TORCH_CHECK(list.size() == inputs.size(), "accl ", op, ": an output list has ",
                    list.size(), " tensors for ", inputs.size(), " inputs");
        outs.push_back(list[i]);
      }
      jobs.push_back(allgatherJob(outs, inputs[i], op));
    }
    return enqueue(OpType::ALLGATHER_COALESCED, outputs, std::move(jobs), true, inputs);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions&) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "accl allgather_into_tensor_coalesced: ",
                outputs.size(), " outputs for ", inputs.size(), " inputs");
    std::vector<Job> jobs;
    for (size_t i = 0; i < inputs.size(); ++i) jobs.push_back(allgatherBaseJob(outputs[i], inputs[i]));
    return enqueue(OpType::COALESCED, {outputs}, std::move(jobs), true, inputs);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    checkOne(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == size_t(getSize()),
                "accl reduce_scatter: expected one list of ", getSize(), " input tensors");
    at::Tensor out = outputs[0];
    for (auto& i : inputs[0]) checkSame(i, out, out.numel(), "reduce_scatter");
    Tensors ins = inputs[0];
    Red red = reduction(out.scalar_type(), opts.reduceOp, "reduce_scatter");
    auto flat = std::make_shared<at::Tensor>();
    Job rs = reduceScatterJob(out, flat, red);
    Job job{[=](const Ctx& c) {
              std::vector<at::Tensor> rows;
              for (auto& i : ins) rows.push_back(i.reshape({-1}));
              *flat = at::cat(rows);
              rs.run(c);
            },
            rs.post};
    return enqueue(OpType::REDUCE_SCATTER, {outputs}, {job}, false, ins);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& opts) override {
    return enqueue(OpType::_REDUCE_SCATTER_BASE, {{out}},
                   {reduceScatterBaseJob(out, in, opts, "reduce_scatter_tensor")}, false, {in});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "accl reduce_scatter_tensor_coalesced: ",
                outputs.size(), " outputs for ", inputs.size(), " inputs");
    std::vector<Job> jobs;
    for (size_t i = 0; i < inputs.size(); ++i)
      jobs.push_back(reduceScatterBaseJob(outputs[i], inputs[i], opts, "reduce_scatter_tensor"));
    return enqueue(OpType::COALESCED, {outputs}, std::move(jobs), true,
                   inputs);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in,
                                               std::vector<int64_t>& outSplits,
                                               std::vector<int64_t>& inSplits,
                                               const c10d::AllToAllOptions&) override {
    const char* op = "all_to_all_single";
    checkTensor(out, op);
    checkTensor(in, op);
    TORCH_CHECK(in.scalar_type() == out.scalar_type(), "accl ", op, ": dtype ", in.scalar_type(),
                " of the input differs from ", out.scalar_type(), " of the output");
    int size = getSize();
    if (outSplits.empty() && inSplits.empty()) {
      TORCH_CHECK(in.numel() == out.numel() && in.numel() % size == 0, "accl ", op,
                  ": input and output need the same number of elements, divisible by ", size,
                  "; got ", in.numel(), " and ", out.numel());
      auto src = std::make_shared<at::Tensor>();
      auto dst = std::make_shared<at::Tensor>();
      Job job{[=, this](const Ctx& c) {
                *src = in.contiguous();
                *dst = staged(out);
                check(acclAlltoAll(ptr(*src), ptr(*dst), bytes(in) / size, acclUint8, c.comm,
                                   c.stream),
                      "acclAlltoAll");
              },
              [=] { writeBack(out, *dst); }};
      return enqueue(OpType::ALLTOALL_BASE, {{out}}, {job}, false, {in});
    }
    // Unequal blocks along dim 0: one send and one receive per peer, all in one group.
    std::vector<size_t> sendOff, sendLen, recvOff, recvLen;
    splitBytes(in, inSplits, op, "input", &sendOff, &sendLen);
    splitBytes(out, outSplits, op, "output", &recvOff, &recvLen);
    auto src = std::make_shared<at::Tensor>();
    auto dst = std::make_shared<at::Tensor>();
    Job job{[=, this](const Ctx& c) {
              *src = in.contiguous();
              *dst = staged(out);
              exchange(c, *src, sendOff, sendLen, *dst, recvOff, recvLen);
            },
            [=] { writeBack(out, *dst); }};
    return enqueue(OpType::ALLTOALL_BASE, {{out}}, {job}, false, {in});
  }

  c10::intrusive_ptr<c10d::Work> alltoall(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllToAllOptions&) override {
    int size = getSize();
    TORCH_CHECK(outputs.size() == size_t(size) && inputs.size() == size_t(size),
                "accl all_to_all: expected ", size, " input and ", size, " output tensors, got ",
                inputs.size(), " and ", outputs.size());
    for (int r = 0; r < size; ++r) {
      checkTensor(inputs[r], "all_to_all");
      checkTensor(outputs[r], "all_to_all");
      TORCH_CHECK(inputs[r].scalar_type() == outputs[r].scalar_type(),
                  "accl all_to_all: input and output dtypes differ");
    }
    Tensors ins = inputs, outs = outputs;
    auto src = std::make_shared<Tensors>();
    auto dst = std::make_shared<Tensors>();
    Job job{[=, this](const Ctx& c) {
              check(acclGroupStart(), "acclGroupStart");
              std::exception_ptr err;
              try {
                for (int r = 0; r < size; ++r) {
                  src->push_back(ins[r].contiguous());
                  dst->push_back(staged(outs[r]));
                }
                for (int r = 0; r < size; ++r) {
                  if (r == getRank()) {
                    TORCH_CHECK(bytes((*src)[r]) == bytes((*dst)[r]), "accl all_to_all: ",
                                "this rank's own input and output blocks differ in size");
                    asBytes((*dst)[r]).copy_(asBytes((*src)[r]));  // may be device memory
                    continue;
                  }
                  check(acclSend(ptr((*src)[r]), bytes((*src)[r]), acclUint8, r, c.comm, c.stream),
                        "acclSend");
                  check(acclRecv(ptr((*dst)[r]), bytes((*dst)[r]), acclUint8, r, c.comm, c.stream),
                        "acclRecv");
                }
              } catch (...) {
                err = std::current_exception();
              }
              acclResult_t r = acclGroupEnd();
              if (err) std::rethrow_exception(err);
              check(r, "acclGroupEnd (all_to_all)");
            },
            [=] {
              for (int r = 0; r < size; ++r) writeBack(outs[r], (*dst)[r]);
            }};
    return enqueue(OpType::ALLTOALL, {outputs}, {job}, false, inputs);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                        const c10d::GatherOptions& opts) override {
    checkOne(inputs, "gather");
    int root = checkRoot(opts.rootRank, "gather"), size = getSize();
    at::Tensor in = inputs[0];
    bool isRoot = root == getRank();
    Tensors outs;
    if (isRoot) {
      TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == size_t(size),
                  "accl gather: the root needs one list of ", size, " output tensors");
      outs = outputs[0];
      for (auto& o : outs) checkSame(o, in, in.numel(), "gather");
    } else {
      TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                  "accl gather: only the root takes output tensors");
    }
    auto flat = std::make_shared<at::Tensor>();
    auto src = std::make_shared<at::Tensor>();
    Job job{[=, this](const Ctx& c) {
              *src = in.contiguous();
              *flat = at::empty({isRoot ? int64_t(size) : 0, in.numel()}, in.options());
              check(acclGather(ptr(*src), isRoot ? ptr(*flat) : nullptr, bytes(in), acclUint8,
                               root, c.comm, c.stream),
                    "acclGather");
            },
            [=] {
              for (size_t r = 0; r < outs.size(); ++r) outs[r].copy_((*flat)[r].view(outs[r].sizes()));
            }};
    return enqueue(OpType::GATHER, outputs, {job}, false, inputs);
  }

  c10::intrusive_ptr<c10d::Work> scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    checkOne(outputs, "scatter");
    int root = checkRoot(opts.rootRank, "scatter"), size = getSize();
    at::Tensor out = outputs[0];
    bool isRoot = root == getRank();
    Tensors ins;
    if (isRoot) {
      TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == size_t(size),
                  "accl scatter: the root needs one list of ", size, " input tensors");
      ins = inputs[0];
      for (auto& i : ins) checkSame(i, out, out.numel(), "scatter");
    } else {
      TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                  "accl scatter: only the root takes input tensors");
    }
    auto flat = std::make_shared<at::Tensor>();
    auto dst = std::make_shared<at::Tensor>();
    Job job{[=, this](const Ctx& c) {
              if (isRoot) {
                std::vector<at::Tensor> rows;
                for (auto& i : ins) rows.push_back(i.reshape({-1}));
                *flat = at::cat(rows);
              }
              *dst = staged(out);
              check(acclScatter(isRoot ? ptr(*flat) : nullptr, ptr(*dst), bytes(out), acclUint8,
                                root, c.comm, c.stream),
                    "acclScatter");
            },
            [=] { writeBack(out, *dst); }};
    return enqueue(OpType::SCATTER, {outputs}, {job}, false, ins);
  }

  // Tags are not matched: as on NCCL, messages between two ranks match in the order sent.
  c10::intrusive_ptr<c10d::Work> send(Tensors& tensors, int dst, int /*tag*/) override {
    checkOne(tensors, "send");
    checkPeer(dst, "send");
    at::Tensor t = tensors[0];
    auto src = std::make_shared<at::Tensor>();
    Job job{[=, this](const Ctx& c) {
              *src = t.contiguous();
              // Before the message: a large one may wait for the receiver to take it.
              if (anySource_) store_->add(anySourceKey(dst, getRank()), 1);
              check(acclSend(ptr(*src), bytes(t), acclUint8, dst, c.comm, c.stream), "acclSend");
            },
            nullptr};
    return enqueue(OpType::SEND, {tensors}, {job});
  }

  c10::intrusive_ptr<c10d::Work> recv(Tensors& tensors, int src, int /*tag*/) override {
    checkOne(tensors, "recv");
    checkPeer(src, "recv");
    at::Tensor t = tensors[0];
    auto buf = std::make_shared<at::Tensor>();
    Job job{[=, this](const Ctx& c) {
              *buf = staged(t);
              if (anySource_) ++received_[src];
              check(acclRecv(ptr(*buf), bytes(t), acclUint8, src, c.comm, c.stream), "acclRecv");
            },
            [=] { writeBack(t, *buf); }};
    return enqueue(OpType::RECV, {tensors}, {job});
  }

  // accl matches messages by sender: a receive names its peer. So that a receive can take the
  // next message from whichever rank sent one, every send of a group made with any-source
  // support (ACCL_TORCH_ANY_SOURCE=1) first adds 1 to a counter in the group's store, one per
  // (receiver, sender) pair. This worker counts what it has received from each sender; the
  // any-source receive polls the counters until one is ahead of its count, then receives from
  // that sender. Messages between a pair stay in send order, so nothing can mismatch. The cost
  // is one store round trip per send of such a group.
  c10::intrusive_ptr<c10d::Work> recvAnysource(Tensors& tensors, int /*tag*/) override {
    checkOne(tensors, "recv (any source)");
    TORCH_CHECK(anySource_, "accl: recv without a source rank needs a group made with "
                "ACCL_TORCH_ANY_SOURCE=1 in the environment of every rank (each send then "
                "costs a store round trip); or name the source (src=...)");
    TORCH_CHECK(getSize() > 1, "accl recv (any source): no other rank in a group of one");
    at::Tensor t = tensors[0];
    auto buf = std::make_shared<at::Tensor>();
    auto source = std::make_shared<std::atomic<int>>(-1);
    Job job{[=, this](const Ctx& c) {
              *buf = staged(t);
              int src = awaitAnySender();
              ++received_[src];
              check(acclRecv(ptr(*buf), bytes(t), acclUint8, src, c.comm, c.stream), "acclRecv");
              source->store(src);
            },
            [=] { writeBack(t, *buf); }};
    auto work = enqueue(OpType::RECVANYSOURCE, {tensors}, {job});
    static_cast<WorkACCL*>(work.get())->setSource(source);
    return work;
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    Job job{[](const Ctx& c) { check(acclBarrier(c.comm, c.stream), "acclBarrier"); }, nullptr};
    return enqueue(OpType::BARRIER, {}, {job});
  }

  // As gloo's, from the calling thread (not queued behind other ops: it is for finding ranks
  // that hang): every other rank reports to rank 0 and waits for its verdict; rank 0 waits for
  // them under opts.timeout (the group's when unset), names the ranks that did not come (the
  // first one, or all with waitAllRanks) and gives the verdict, so that the ranks that came fail
  // at once too. The exchange goes through the group's c10d store, not the communicator, so a
  // failed monitored barrier leaves the group usable.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override {
    TORCH_CHECK(store_, "accl monitoredBarrier: this group was made by split_group and has no ",
                "store; use a group made by new_group");
    int size = getSize(), rank = getRank();
    int64_t ms = opts.timeout == c10d::kUnsetTimeout ? int64_t(timeout_.load() * 1000)
                                                     : int64_t(opts.timeout.count());
    std::string base = "accl/monitored_barrier/" + std::to_string(++monitoredSeq_) + "/";
    if (size == 1) return;
    if (rank != 0) {
      store_->set(base + std::to_string(rank), std::vector<uint8_t>{1});
      std::string verdict = awaitKey(base + "verdict", timeout_.load(), "rank 0's verdict");
      if (verdict != "ok")
        fail("accl: Rank " + std::to_string(rank) + " successfully reached monitoredBarrier, "
             "but received errors while waiting for send/recv from rank 0. Please check rank 0 "
             "logs for faulty rank. (rank 0: " + verdict + ")");
      return;
    }
    std::vector<bool> came(size, false);
    came[0] = true;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    std::string error;
    if (ms <= 0 && !waitAllRanks) {
      error = "Rank 0 timed out in monitoredBarrier after " + std::to_string(ms) + " ms";
    } else {
      for (int polls = 0;; ++polls) {
        bool all = true;
        for (int p = 1; p < size; ++p) {
          if (!came[p]) came[p] = store_->check({base + std::to_string(p)});
          all = all && came[p];
        }
        if (all || std::chrono::steady_clock::now() > deadline) break;
        TORCH_CHECK(!aborted_, "accl monitoredBarrier: the process group was aborted");
        backoff(polls);
      }
      std::string missing;
      int count = 0;
      for (int p = 1; p < size; ++p)
        if (!came[p] && (waitAllRanks || count == 0))
          missing += (count++ ? ", " : "") + std::to_string(p);
      if (count)
        error = "[Rank 0]: " + std::string(count > 1 ? "Ranks " : "Rank ") + missing +
                " failed to pass monitoredBarrier in " + std::to_string(ms) + " ms";
    }
    std::string verdict = error.empty() ? "ok" : error;
    store_->set(base + "verdict", std::vector<uint8_t>(verdict.begin(), verdict.end()));
    for (int p = 1; p < size; ++p)
      if (came[p]) store_->deleteKey(base + std::to_string(p));
    if (!error.empty()) fail("accl: " + error);
  }
  void setSequenceNumberForGroup() override {}  // every rank starts at 0
  uint64_t getSequenceNumberForGroup() override {
    std::lock_guard<std::mutex> lock(mu_);
    return seq_;
  }

  // ------------------------------------------------------------ coalescing

  // Ops issued until endCoalescing run as one accl group, so that batched sends and receives
  // progress together (batch_isend_irecv) instead of one after another.
  void startCoalescing() override {
    std::lock_guard<std::mutex> lock(mu_);
    TORCH_CHECK(!coalescing_, "accl: startCoalescing called twice without endCoalescing");
    coalescing_ = true;
  }

  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    Entry e;
    c10::intrusive_ptr<WorkACCL> work;
    {
      std::lock_guard<std::mutex> lock(mu_);
      TORCH_CHECK(coalescing_, "accl: endCoalescing without startCoalescing");
      coalescing_ = false;
      e = std::move(pending_);
      pending_ = Entry();
      work = c10::make_intrusive<WorkACCL>(getRank(), OpType::COALESCED, seq_,
                                           std::vector<Tensors>{});
    }
    e.works.push_back(work);
    e.grouped = true;
    push(std::move(e));
    return work;
  }

  // ------------------------------------------------------------ teardown

  // Wakes an accl call blocked in the worker (it fails), fails every queued op, frees the
  // communicator. Safe from any thread.
  void abort() override { close(true); }

  // Lets the queued ops finish (each bounded by the timeout), then frees the communicator.
  void shutdown() override { close(false); }

 private:
  struct Entry {
    std::vector<Job> jobs;
    std::vector<c10::intrusive_ptr<WorkACCL>> works;
    bool grouped = false;
    c10::Device device{c10::kCPU};
    std::vector<std::shared_ptr<c10::Event>> ready;  // recorded on the callers' streams
  };

  // The accelerator communicator: made by the worker at the first op on an accelerator tensor,
  // on the device of that tensor, with the accl backend accelBackends() names for its type.
  struct Accel {
    c10::Device device;
    acclComm_t comm;
    c10::Stream stream;  // accl's calls and the jobs' tensor operations run here
  };

  int checkRoot(int64_t root, const char* op) {
    TORCH_CHECK(root >= 0 && root < getSize(), "accl ", op, ": root ", root,
                " is not a rank of this group of ", getSize());
    return int(root);
  }

  void checkPeer(int peer, const char* op) {
    TORCH_CHECK(peer >= 0 && peer < getSize() && peer != getRank(), "accl ", op, ": peer ", peer,
                " is not another rank of this group of ", getSize(), " (this is rank ",
                getRank(), ")");
  }

  // Sleeps between polls of the store: 20 us, doubling up to 1 ms.
  static void backoff(int polls) {
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 20 << std::min(polls, 6))));
  }

  // The value of `key` in the group's store once it is there, polled so that abort() and the
  // timeout end the wait.
  std::string awaitKey(const std::string& key, double timeout, const char* what) {
    auto start = std::chrono::steady_clock::now();
    for (int polls = 0; !store_->check({key}); ++polls) {
      TORCH_CHECK(!aborted_, "accl: the process group was aborted while waiting for ", what);
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout)
        fail("accl: rank " + std::to_string(getRank()) + " timed out after " +
             std::to_string(timeout) + " s waiting for " + what + " (the process group timeout)");
      backoff(polls);
    }
    std::vector<uint8_t> v = store_->get(key);
    return std::string(v.begin(), v.end());
  }

  // The store counter of messages `src` has sent to `dst` (any-source groups).
  static std::string anySourceKey(int dst, int src) {
    return "accl/any_source/" + std::to_string(dst) + "/" + std::to_string(src);
  }

  // The worker's side of recvAnysource: a sender that has sent this rank more messages than it
  // has received from it, polling the store round robin (from the rank after the last one
  // served, so no sender starves) under the group's timeout.
  int awaitAnySender() {
    int size = getSize(), rank = getRank();
    auto start = std::chrono::steady_clock::now();
    for (int polls = 0;; ++polls) {
      for (int i = 1; i <= size; ++i) {
        int src = (lastAnySource_ + i) % size;
        if (src == rank) continue;
        if (store_->add(anySourceKey(rank, src), 0) > received_[src]) {
          lastAnySource_ = src;
          return src;
        }
      }
      if (aborted_) fail("accl: the process group was aborted during a recv from any source");
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_.load())
        fail("accl: recv from any source on rank " + std::to_string(rank) + ": no rank sent a "
             "message within the process group timeout (" + std::to_string(timeout_.load()) +
             " s)");
      backoff(polls);  // each poll is a store round trip per peer
    }
  }

  Job allreduceJob(const at::Tensor& t, const ReduceOp& rop) {
    Red red = reduction(t.scalar_type(), rop, "allreduce");
    int size = getSize();
    auto buf = std::make_shared<at::Tensor>();
    auto all = std::make_shared<at::Tensor>();
    return Job{[=, this](const Ctx& c) {
                 *buf = staged(t);
                 applyPremul(red, *buf);
                 if (red.host) {
                   *all = at::empty({size, t.numel()}, t.options());
                   check(acclAllGather(ptr(*buf), ptr(*all), bytes(t), acclUint8, c.comm, c.stream),
                         "acclAllGather");
                 } else {
                   check(acclAllReduce(ptr(*buf), ptr(*buf), t.numel() * red.mult, red.type,
                                       red.op, c.comm, c.stream),
                         "acclAllReduce");
                 }
               },
               [=] {
                 if (red.host) buf->copy_(hostFold(*all, red, size).view(buf->sizes()));
                 writeBack(t, *buf);
               }};
  }

  // Sparse (COO) all-reduce, a sum as gloo's: every rank gathers every rank's indices and
  // values (padded to the largest count of non-zeros) and adds the n sparse tensors in rank
  // order, so all ranks get the same result, which replaces the input's contents.
  Job sparseAllreduceJob(const at::Tensor& t, const ReduceOp& rop) {
    const char* op = "allreduce";
    TORCH_CHECK(t.device().is_cpu(), "accl ", op, ": sparse tensors are supported on cpu only");
    TORCH_CHECK(rop.op_ == ReduceOp::SUM, "accl ", op, ": sparse tensors support only SUM, not ",
                opName(rop.op_));
    int size = getSize();
    auto sum = std::make_shared<at::Tensor>();
    return Job{[=, this](const Ctx& c) {
                 at::Tensor in = t.coalesce(), idx = in._indices(), val = in._values();
                 int64_t nnz = in._nnz();
                 at::Tensor counts = at::empty({size}, at::kLong);
                 check(acclAllGather(&nnz, ptr(counts), 1, acclInt64, c.comm, c.stream),
                       "acclAllGather");
                 int64_t most = counts.max().item<int64_t>();
                 at::Tensor pidx = at::zeros({idx.size(0), most}, idx.options());
                 std::vector<int64_t> shape = val.sizes().vec();
                 shape[0] = most;
                 at::Tensor pval = at::zeros(shape, val.options());
                 pidx.narrow(1, 0, nnz).copy_(idx);
                 pval.narrow(0, 0, nnz).copy_(val);
                 shape.insert(shape.begin(), size);
                 at::Tensor allIdx = at::empty({size, idx.size(0), most}, idx.options());
                 at::Tensor allVal = at::empty(shape, val.options());
                 check(acclAllGather(ptr(pidx), ptr(allIdx), bytes(pidx), acclUint8, c.comm,
                                     c.stream), "acclAllGather");
                 check(acclAllGather(ptr(pval), ptr(allVal), bytes(pval), acclUint8, c.comm,
                                     c.stream), "acclAllGather");
                 for (int r = 0; r < size; ++r) {
                   int64_t k = counts[r].item<int64_t>();
                   at::Tensor part = at::sparse_coo_tensor(allIdx[r].narrow(1, 0, k),
                                                           allVal[r].narrow(0, 0, k), t.sizes());
                   *sum = r ? *sum + part : part;
                 }
               },
               [=] { t.copy_(sum->coalesce()); }};
  }

  // Gathers every rank's `in` into outs[r].
  Job allgatherJob(const Tensors& outs, const at::Tensor& in, const char* op) {
    checkTensor(in, op);
    TORCH_CHECK(outs.size() == size_t(getSize()), "accl ", op, ": expected ", getSize(),
                " output tensors, got ", outs.size());
    for (auto& o : outs) checkSame(o, in, in.numel(), op);
    auto flat = std::make_shared<at::Tensor>();
    auto src = std::make_shared<at::Tensor>();
    return Job{[=, this](const Ctx& c) {
                 *src = in.contiguous();
                 *flat = at::empty({int64_t(outs.size()), in.numel()}, in.options());
                 check(acclAllGather(ptr(*src), ptr(*flat), bytes(in), acclUint8, c.comm, c.stream),
                       "acclAllGather");
               },
               [=] {
                 for (size_t r = 0; r < outs.size(); ++r)
                   outs[r].copy_((*flat)[r].view(outs[r].sizes()));
               }};
  }

  Job allgatherBaseJob(const at::Tensor& out, const at::Tensor& in) {
    const char* op = "all_gather_into_tensor";
    checkTensor(in, op);
    checkSame(out, in, in.numel() * getSize(), op);
    auto src = std::make_shared<at::Tensor>();
    auto dst = std::make_shared<at::Tensor>();
    return Job{[=, this](const Ctx& c) {
                 *src = in.contiguous();
                 *dst = staged(out);
                 check(acclAllGather(ptr(*src), ptr(*dst), bytes(in), acclUint8, c.comm, c.stream),
                       "acclAllGather");
               },
               [=] { writeBack(out, *dst); }};
  }

  // Reduces the flat input (size blocks of out.numel()) and scatters block r to rank r.
  Job reduceScatterJob(const at::Tensor& out, std::shared_ptr<at::Tensor> flat, const Red& red) {
    int size = getSize(), rank = getRank();
    auto dst = std::make_shared<at::Tensor>();
    auto all = std::make_shared<at::Tensor>();
    return Job{[=, this](const Ctx& c) {
                 applyPremul(red, *flat);
                 *dst = staged(out);
                 if (red.host) {
                   *all = at::empty({size, flat->numel()}, out.options());
                   check(acclAllGather(ptr(*flat), ptr(*all), bytes(*flat), acclUint8, c.comm,
                                       c.stream),
                         "acclAllGather");
                 } else {
                   check(acclReduceScatter(ptr(*flat), ptr(*dst), out.numel() * red.mult,
                                           red.type, red.op, c.comm, c.stream),
                         "acclReduceScatter");
                 }
               },
               [=] {
                 if (red.host) {
                   at::Tensor folded = hostFold(all->view({size, size, out.numel()}), red, size);
                   dst->copy_(folded[rank].view(dst->sizes()));
                 }
                 writeBack(out, *dst);
               }};
  }

  Job reduceScatterBaseJob(const at::Tensor& out, const at::Tensor& in,
                           const c10d::ReduceScatterOptions& opts, const char* op) {
    checkTensor(out, op);
    checkSame(in, out, out.numel() * getSize(), op);
    Red red = reduction(out.scalar_type(), opts.reduceOp, op);
    auto flat = std::make_shared<at::Tensor>();
    Job rs = reduceScatterJob(out, flat, red);
    // A private copy when PREMUL_SUM would otherwise scale the caller's input.
    bool copy = red.isPremul;
    return Job{[=, this](const Ctx& c) {
                 *flat = copy ? in.reshape({-1}).clone() : in.contiguous().view({-1});
                 rs.run(c);
               },
               rs.post};
  }

  // Byte offsets and lengths of the blocks along dim 0 (equal blocks when `splits` is empty).
  void splitBytes(const at::Tensor& t, const std::vector<int64_t>& splits, const char* op,
                  const char* what, std::vector<size_t>* off, std::vector<size_t>* len) {
    int size = getSize();
    int64_t rows = t.dim() ? t.size(0) : 1;
    size_t rowBytes = rows ? bytes(t) / rows : 0;
    std::vector<int64_t> s = splits;
    if (s.empty()) {
      TORCH_CHECK(rows % size == 0, "accl ", op, ": ", rows, " ", what, " rows do not split into ",
                  size, " equal blocks");
      s.assign(size, rows / size);
    }
    TORCH_CHECK(s.size() == size_t(size), "accl ", op, ": ", s.size(), " ", what,
                " split sizes for ", size, " ranks");
    int64_t sum = 0;
    for (int64_t x : s) {
      TORCH_CHECK(x >= 0, "accl ", op, ": negative ", what, " split size ", x);
      off->push_back(sum * rowBytes);
      len->push_back(x * rowBytes);
      sum += x;
    }
    TORCH_CHECK(sum == rows, "accl ", op, ": ", what, " split sizes add up to ", sum, ", but the ",
                what, " has ", rows, " rows");
  }

  // Each rank sends block p of `in` to rank p and receives rank p's block into block p of `out`
  // (both contiguous). Empty blocks are skipped on both sides, which agree on them when the
  // splits match.
  void exchange(const Ctx& c, const at::Tensor& in, const std::vector<size_t>& sOff,
                const std::vector<size_t>& sLen, const at::Tensor& out,
                const std::vector<size_t>& rOff, const std::vector<size_t>& rLen) {
    int rank = getRank();
    TORCH_CHECK(sLen[rank] == rLen[rank], "accl all_to_all_single: this rank sends ",
                sLen[rank], " bytes to itself but expects ", rLen[rank]);
    // A tensor copy, not memcpy: the blocks may be in device memory.
    asBytes(out).narrow(0, rOff[rank], rLen[rank]).copy_(asBytes(in).narrow(0, sOff[rank], sLen[rank]));
    const char* src = static_cast<const char*>(ptr(in));
    char* dst = static_cast<char*>(ptr(out));
    check(acclGroupStart(), "acclGroupStart");
    std::exception_ptr err;
    try {
      for (int p = 0; p < getSize(); ++p) {
        if (p == rank) continue;
        if (sLen[p])
          check(acclSend(src + sOff[p], sLen[p], acclUint8, p, c.comm, c.stream), "acclSend");
        if (rLen[p])
          check(acclRecv(dst + rOff[p], rLen[p], acclUint8, p, c.comm, c.stream), "acclRecv");
      }
    } catch (...) {
      err = std::current_exception();
    }
    acclResult_t r = acclGroupEnd();
    if (err) std::rethrow_exception(err);
    check(r, "acclGroupEnd (all_to_all_single)");
  }

  // The device an op's tensors are on (cpu when it has none); they must all be on one.
  static c10::Device deviceOf(OpType type, const std::vector<Tensors>& outputs,
                              const Tensors& inputs) {
    std::optional<c10::Device> dev;
    auto see = [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (!dev) dev = t.device();
      TORCH_CHECK(*dev == t.device(), "accl ", c10d::opTypeToString(type), ": tensors on ",
                  dev->str(), " and on ", t.device().str(), " in one operation");
    };
    for (auto& list : outputs)
      for (auto& t : list) see(t);
    for (auto& t : inputs) see(t);
    return dev.value_or(c10::Device(c10::kCPU));
  }

  c10::intrusive_ptr<c10d::Work> enqueue(OpType type, std::vector<Tensors> outputs,
                                         std::vector<Job> jobs, bool grouped = false,
                                         const Tensors& inputs = {}) {
    c10::Device dev = deviceOf(type, outputs, inputs);
    std::shared_ptr<c10::Event> ready;
    if (!dev.is_cpu()) {
      // The op reads what the caller's current stream has yet to write: the worker's stream
      // waits for this event before it starts.
      ready = std::make_shared<c10::Event>(dev.type());
      ready->record(c10::impl::VirtualGuardImpl(dev.type()).getStream(dev));
    }
    std::unique_lock<std::mutex> lock(mu_);
    TORCH_CHECK(!closed_, "accl: the process group was ",
                aborted_ ? "aborted" : "shut down", "; create a new one");
    if (!dev.is_cpu()) {
      TORCH_CHECK(store_, "accl ", c10d::opTypeToString(type), ": this group was made by ",
                  "split_group and serves cpu tensors only; make it with new_group for ",
                  dev.str(), " tensors");
      if (!accelDevice_) accelDevice_ = dev;
      TORCH_CHECK(*accelDevice_ == dev, "accl ", c10d::opTypeToString(type), ": this group ",
                  "runs on ", accelDevice_->str(), ", got ", dev.str(), " tensors (one device ",
                  "per process and group, as with nccl)");
    }
    if (coalescing_) {
      TORCH_CHECK(pending_.jobs.empty() || pending_.device == dev, "accl: coalesced ops on ",
                  pending_.device.str(), " and ", dev.str());
      pending_.device = dev;
    }
    // As NCCL: the group's sequence number counts collectives; sends and receives count apart,
    // since they need not be the same on every rank.
    bool p2p = type == OpType::SEND || type == OpType::RECV || type == OpType::RECVANYSOURCE;
    uint64_t seq = p2p ? ++p2pSeq_ : ++seq_;
    auto work = c10::make_intrusive<WorkACCL>(getRank(), type, seq, std::move(outputs));
    if (coalescing_) {
      for (auto& j : jobs) pending_.jobs.push_back(std::move(j));
      pending_.works.push_back(work);
      if (ready) pending_.ready.push_back(ready);
      return work;
    }
    Entry e{std::move(jobs), {work}, grouped, dev, {}};
    if (ready) e.ready.push_back(ready);
    queue_.push_back(std::move(e));
    cv_.notify_one();
    return work;
  }

  void push(Entry e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      auto err = errorPtr("accl: the process group was closed");
      for (auto& w : e.works) w->complete(err);
      return;
    }
    queue_.push_back(std::move(e));
    cv_.notify_one();
  }

  void runEntry(Entry& e) {
    if (e.device.is_cpu()) return runJobs(e, Ctx{comm_, nullptr});
    const Accel& a = accel(e.device);
    c10::DeviceGuard onDevice(a.device);
    for (auto& ev : e.ready) ev->block(a.stream);
    {
      c10::StreamGuard onStream(a.stream);
      runJobs(e, Ctx{a.comm, a.stream.native_handle()});
    }
    c10::Event done(a.device.type());
    done.record(a.stream);
    awaitDevice(done, a);
  }

  const Accel& accel(c10::Device dev) {
    if (accel_) return *accel_;
    std::string key = "accl/" + c10::DeviceTypeName(dev.type(), true) + "/unique_id";
    acclUniqueId id;
    if (getRank() == 0) {
      check(acclGetUniqueId(&id), "acclGetUniqueId");
      store_->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      std::vector<uint8_t> v = store_->get(key);
      TORCH_CHECK(v.size() == sizeof(id.internal), "accl: the ", dev.str(),
                  " communicator's unique id in the store has ", v.size(), " bytes");
      memcpy(id.internal, v.data(), v.size());
    }
    c10::DeviceGuard onDevice(dev);  // vendor libraries bind a communicator to the current device
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.timeout = timeout_;
    const std::string& backend = accelBackends().at(dev.type());
    cfg.backend = backend.c_str();
    acclComm_t comm = nullptr;
    check(acclCommInitRankConfig(&comm, getSize(), id, getRank(), &cfg),
          ("acclCommInitRankConfig (" + backend + " on " + dev.str() + ")").c_str());
    accel_.emplace(Accel{dev, comm, c10::impl::VirtualGuardImpl(dev.type()).getStreamFromGlobalPool(dev)});
    accelComm_ = comm;
    return *accel_;
  }

  // Waits until the device has run the entry, under the group's timeout. A vendor's kernel
  // waiting for a peer that never comes ends only when its communicator is aborted, so a
  // timeout or an asynchronous error aborts it, and later ops on the device fail.
  void awaitDevice(c10::Event& done, const Accel& a) {
    auto start = std::chrono::steady_clock::now();
    for (uint64_t polls = 0; !done.query(); ++polls) {
      if (aborted_) fail("accl: the process group was aborted while an operation ran on " +
                         a.device.str());
      if (polls % 64 == 0) {
        acclResult_t err = acclSuccess;
        acclResult_t r = acclCommGetAsyncError(a.comm, &err);
        if (r != acclSuccess || (err != acclSuccess && err != acclInProgress)) {
          std::string msg = acclGetLastError(nullptr);
          acclCommAbort(a.comm);
          fail("accl: the " + a.device.str() + " communicator failed: " + msg);
        }
        double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (waited > timeout_) {
          acclCommAbort(a.comm);
          fail("accl: an operation on " + a.device.str() + " did not complete within the "
               "process group timeout (" + std::to_string(timeout_.load()) + " s); the " +
               a.device.str() + " communicator was aborted");
        }
      }
      if (polls < 1000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  static void runJobs(Entry& e, const Ctx& c) {
    if (!e.grouped || e.jobs.size() <= 1) {
      for (auto& j : e.jobs) {
        j.run(c);
        if (j.post) j.post();
      }
      return;
    }
    check(acclGroupStart(), "acclGroupStart");
    std::exception_ptr err;
    for (auto& j : e.jobs) {
      try {
        j.run(c);
      } catch (...) {
        if (!err) err = std::current_exception();
      }
    }
    acclResult_t r = acclGroupEnd();
    if (err) std::rethrow_exception(err);
    check(r, "acclGroupEnd");
    for (auto& j : e.jobs)
      if (j.post) j.post();
  }

  void loop() {
    for (;;) {
      Entry e;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty() || stop_; });
        if (queue_.empty()) return;
        e = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr err;
      try {
        if (aborted_.load())
          fail("accl: the process group was aborted before this operation ran");
        runEntry(e);
      } catch (abi::__forced_unwind&) {
        throw;  // the thread is being cancelled: let it end
      } catch (...) {
        err = std::current_exception();
      }
      for (auto& w : e.works) w->complete(err);
    }
  }

  void close(bool abort) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      stop_ = true;
      if (abort) aborted_ = true;
      cv_.notify_one();
    }
    // acclCommAbort wakes a call blocked in the worker; the handle stays safe to pass to accl
    // (calls on it then fail), so the worker can finish and fail what is left.
    if (abort) {
      acclCommAbort(comm_);
      if (acclComm_t a = accelComm_.load()) acclCommAbort(a);
    }
    if (worker_.joinable()) {
      if (worker_.get_id() == std::this_thread::get_id()) {
        worker_.detach();  // closed from a future callback on the worker itself
      } else if (Py_IsInitialized() && PyGILState_Check()) {
        // Reached from Python (say, a DDP Reducer freed with this group): the worker may need
        // the GIL to finish, to drop a tensor that has a Python object. Let go of it meanwhile.
        pybind11::gil_scoped_release nogil;
        worker_.join();
      } else {
        worker_.join();
      }
    }
    if (!abort) {
      acclCommDestroy(comm_);
      if (accel_) {
        c10::DeviceGuard onDevice(accel_->device);
        acclCommDestroy(accel_->comm);
      }
    }
  }

  static std::mutex& liveMutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<c10::weak_intrusive_ptr<ProcessGroupACCL>>& live() {
    static std::vector<c10::weak_intrusive_ptr<ProcessGroupACCL>> v;
    return v;
  }

  acclComm_t comm_ = nullptr;  // for cpu tensors
  std::atomic<double> timeout_{0};  // seconds: the latest setTimeout, else the creation's
  c10::intrusive_ptr<c10d::Store> store_;
  bool anySource_ = false;  // sends announce themselves (recvAnysource)
  std::map<int, int64_t> received_;  // the worker's: messages received from each rank (anySource_)
  int lastAnySource_ = 0;            // the worker's: the sender the last any-source recv took
  std::atomic<uint64_t> monitoredSeq_{0};  // monitored barriers called: their store keys
  std::optional<c10::Device> accelDevice_;  // guarded by mu_: the device ops were enqueued for
  std::optional<Accel> accel_;              // the worker's
  std::atomic<acclComm_t> accelComm_{nullptr};  // accel_->comm, for abort() from any thread
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  Entry pending_;  // ops issued while coalescing
  bool coalescing_ = false;
  bool stop_ = false;
  bool closed_ = false;
  std::atomic<bool> aborted_{false};
  uint64_t seq_ = 0;     // collectives issued
  uint64_t p2pSeq_ = 0;  // sends and receives issued
  std::thread worker_;
};

}  // namespace accl_torch

PYBIND11_MODULE(_accl_torch, m) {
  namespace py = pybind11;
  m.doc() = "The torch.distributed backend of accl; use it through accl.distributed.";
  // The base class must be known to pybind11 before a subclass is registered.
  py::module_::import("torch.distributed");
  m.attr("torch_version") = ACCL_TORCH_VERSION;
  py::class_<accl_torch::ProcessGroupACCL, c10d::Backend,
             c10::intrusive_ptr<accl_torch::ProcessGroupACCL>>(m, "ProcessGroupACCL")
      .def(py::init([](const std::string& uid, int rank, int size, double timeout,
                       c10::intrusive_ptr<c10d::Store> store, bool anySource) {
             return accl_torch::ProcessGroupACCL::create(uid, rank, size, timeout,
                                                         std::move(store), anySource);
           }),
           py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("store"), py::arg("any_source") = false,
           py::call_guard<py::gil_scoped_release>())
      // torch binds getError only for NCCL; this makes it reachable from Python for accl too.
      .def("get_error", &accl_torch::ProcessGroupACCL::getError)
      ;
  // Called by accl.distributed before any group is made, for each accelerator device type it
  // serves: tensors on `device_type` ("cuda", …) go to a communicator of accl backend `backend`.
  m.def("serve", [](const std::string& deviceType, const std::string& backend) {
    accl_torch::accelBackends()[c10::Device(deviceType).type()] = backend;
  });
  // The GIL is released so that the workers can take it while they finish.
  m.def("_close_all", &accl_torch::ProcessGroupACCL::closeAll,
        py::call_guard<py::gil_scoped_release>());
}
