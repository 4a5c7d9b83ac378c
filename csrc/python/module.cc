// accl._accl: a thin pybind11 layer over the C API. Buffers arrive as integer addresses that the
// Python package has already checked, except in the *_arrays calls; every data-moving call
// releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>

#include "accl/accl.h"

namespace py = pybind11;

namespace {

// A failed C call; translated into the accl.errors class for its code.
struct CallError {
  acclResult_t code;
  std::string message;
};

void check(acclResult_t r) {
  if (r != acclSuccess && r != acclInProgress) throw CallError{r, acclGetLastError(nullptr)};
}

// Sets the accl.errors exception for a failed call.
void setError(const CallError& e) {
  py::object cls = py::module_::import("accl.errors").attr("from_code")(int(e.code));
  PyErr_SetObject(cls.ptr(), py::str(e.message).ptr());
}

void* ptr(uintptr_t a) { return reinterpret_cast<void*>(a); }

// A C-contiguous buffer of one of numpy's native element types, held for the scope; empty
// (`type` -1) when the object is None, has no buffer or refuses `flags` (a read-only array asked
// to be writable, a strided one).
class ArrayView {
 public:
  ArrayView(py::handle obj, int flags) {
    if (obj.is_none()) return;
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      return;
    }
    held_ = true;
    type_ = typeOf(view_.format, view_.itemsize);
  }
  ArrayView(const ArrayView&) = delete;
  ~ArrayView() {
    if (held_) PyBuffer_Release(&view_);
  }
  int type() const { return type_; }  // an acclDataType_t, or -1
  acclDataType_t dtype() const { return acclDataType_t(type_); }
  void* data() const { return view_.buf; }
  void* at(size_t element) const {
    return static_cast<char*>(view_.buf) + element * view_.itemsize;
  }
  size_t count() const { return size_t(view_.len / view_.itemsize); }

 private:
  // The acclDataType_t of a struct-module format in native order, or -1 (bool, whose ops the
  // Python layer maps, and every other type it converts or reports).
  static int typeOf(const char* f, Py_ssize_t size) {
    if (!f) return -1;
    if (f[0] == '@') ++f;  // native order and sizes, which numpy leaves unsaid
    if (!f[0] || f[1]) return -1;
    switch (f[0]) {
      case 'b': return acclInt8;
      case 'B': return acclUint8;
      case 'e': return acclFloat16;
      case 'f': return acclFloat32;
      case 'd': return acclFloat64;
      case 'i': case 'l': case 'q':
        return size == 4 ? acclInt32 : size == 8 ? acclInt64 : -1;
      case 'I': case 'L': case 'Q':
        return size == 4 ? acclUint32 : size == 8 ? acclUint64 : -1;
      default: return -1;
    }
  }
  Py_buffer view_{};
  bool held_ = false;
  int type_ = -1;
};

class HostBuffer {
 public:
  explicit HostBuffer(size_t bytes) : size_(bytes) { check(acclHostAlloc(&data_, bytes)); }
  HostBuffer(const HostBuffer&) = delete;
  ~HostBuffer() { acclHostFree(data_); }
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_;
};

class Comm {
 public:
  Comm(const py::bytes& uid, int rank, int size, double timeout,
       const std::optional<std::string>& backend) {
    std::string s = uid;
    if (s.size() != ACCL_UNIQUE_ID_BYTES)
      throw CallError{acclInvalidArgument, "unique_id must be " +
                                               std::to_string(ACCL_UNIQUE_ID_BYTES) +
                                               " bytes, got " + std::to_string(s.size())};
    acclUniqueId id;
    memcpy(id.internal, s.data(), sizeof(id.internal));
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.timeout = timeout;
    cfg.backend = backend ? backend->c_str() : nullptr;
    acclResult_t r;
    {
      py::gil_scoped_release nogil;
      r = acclCommInitRankConfig(&comm_, size, id, rank, &cfg);
    }
    check(r);
    me_ = rank;
    n_ = size;
  }
  explicit Comm(acclComm_t c) : comm_(c), me_(rank()), n_(size()) {}
  Comm(Comm&& o) noexcept : comm_(o.comm_), released_(o.released_), me_(o.me_), n_(o.n_) {
    o.comm_ = nullptr;
  }
  Comm(const Comm&) = delete;
  ~Comm() {
    // A communicator the program forgot is freed locally, as acclCommDestroy does.
    if (comm_ && !released_) acclCommDestroy(comm_);
  }

  int rank() const {
    int r;
    check(acclCommUserRank(comm_, &r));
    return r;
  }
  int size() const {
    int n;
    check(acclCommCount(comm_, &n));
    return n;
  }
  std::string backend() const {
    const char* name;
    check(acclCommGetBackend(comm_, &name));
    return name;
  }

  void allReduce(uintptr_t s, uintptr_t r, size_t n, int t, int op) {
    check(acclAllReduce(ptr(s), ptr(r), n, acclDataType_t(t), acclRedOp_t(op), comm_, nullptr));
  }
  // The collectives of NCCL on numpy arrays whose buffers need no conversion and fit the call,
  // checked here rather than in Python (the module's *_arrays functions below). `out` None: in
  // place, in the Python API's layout. Each returns false, having done nothing, for anything
  // else (a bad root included): the Python layer then checks the arguments and names what is
  // wrong.
  bool allReduceArrays(py::handle x, py::handle out, int op) {
    // In place the one view serves as both (one buffer request, not two, on this hot path).
    ArrayView res(out.is_none() ? x : out, PyBUF_WRITABLE);
    ArrayView in(out.is_none() ? py::none() : x, PyBUF_SIMPLE);
    const ArrayView& src = out.is_none() ? res : in;
    if (!same(src, res)) return false;
    return run([&] {
      return acclAllReduce(src.data(), res.data(), res.count(), res.dtype(), acclRedOp_t(op),
                           comm_, nullptr);
    });
  }
  bool broadcastArrays(py::handle x, py::handle out, int root) {
    // Off the root (and in place) x is not read: NCCL's sendbuff == recvbuff.
    ArrayView res(out.is_none() ? x : out, PyBUF_WRITABLE);
    if (res.type() < 0 || root < 0 || root >= n_) return false;
    const bool reads = !out.is_none() && me_ == root;
    ArrayView in(reads ? x : py::none(), PyBUF_SIMPLE);
    if (reads && !same(in, res)) return false;
    return run([&] {
      return acclBroadcast(reads ? in.data() : res.data(), res.data(), res.count(), res.dtype(),
                           root, comm_, nullptr);
    });
  }
  bool reduceArrays(py::handle x, py::handle out, int op, int root) {
    // Off the root the output is not used (NCCL's recvbuff), so out is not looked at.
    if (root < 0 || root >= n_) return false;
    const bool atRoot = me_ == root;
    ArrayView in(x, atRoot && out.is_none() ? PyBUF_WRITABLE : PyBUF_SIMPLE);
    ArrayView res(atRoot && !out.is_none() ? out : py::none(), PyBUF_WRITABLE);
    if (in.type() < 0 || (atRoot && !out.is_none() && !same(in, res))) return false;
    void* recv = atRoot && !out.is_none() ? res.data() : in.data();
    return run([&] {
      return acclReduce(in.data(), recv, in.count(), in.dtype(), acclRedOp_t(op), root, comm_,
                        nullptr);
    });
  }
  bool allGatherArrays(py::handle x, py::handle out) {
    const size_t n = size_t(n_);
    if (out.is_none()) {  // x holds n blocks; block `rank` is this rank's
      ArrayView buf(x, PyBUF_WRITABLE);
      if (buf.type() < 0 || buf.count() % n) return false;
      const size_t k = buf.count() / n;
      return run([&] {
        return acclAllGather(buf.at(me_ * k), buf.data(), k, buf.dtype(), comm_, nullptr);
      });
    }
    ArrayView in(x, PyBUF_SIMPLE), res(out, PyBUF_WRITABLE);
    if (in.type() < 0 || res.type() != in.type() || res.count() != in.count() * n) return false;
    return run([&] {
      return acclAllGather(in.data(), res.data(), in.count(), in.dtype(), comm_, nullptr);
    });
  }
  bool reduceScatterArrays(py::handle x, py::handle out, int op) {
    const size_t n = size_t(n_);
    ArrayView in(x, out.is_none() ? PyBUF_WRITABLE : PyBUF_SIMPLE);
    ArrayView res(out, PyBUF_WRITABLE);
    if (in.type() < 0 || in.count() % n) return false;
    const size_t k = in.count() / n;  // in place the result lands in block `rank` of x
    if (!out.is_none() && (res.type() != in.type() || res.count() != k)) return false;
    void* recv = out.is_none() ? in.at(me_ * k) : res.data();
    return run([&] {
      return acclReduceScatter(in.data(), recv, k, in.dtype(), acclRedOp_t(op), comm_, nullptr);
    });
  }
  void broadcast(uintptr_t s, uintptr_t r, size_t n, int t, int root) {
    check(acclBroadcast(ptr(s), ptr(r), n, acclDataType_t(t), root, comm_, nullptr));
  }
  void reduce(uintptr_t s, uintptr_t r, size_t n, int t, int op, int root) {
    check(acclReduce(ptr(s), ptr(r), n, acclDataType_t(t), acclRedOp_t(op), root, comm_,
                     nullptr));
  }
  void allGather(uintptr_t s, uintptr_t r, size_t n, int t) {
    check(acclAllGather(ptr(s), ptr(r), n, acclDataType_t(t), comm_, nullptr));
  }
  void reduceScatter(uintptr_t s, uintptr_t r, size_t n, int t, int op) {
    check(acclReduceScatter(ptr(s), ptr(r), n, acclDataType_t(t), acclRedOp_t(op), comm_,
                            nullptr));
  }
  void allToAll(uintptr_t s, uintptr_t r, size_t n, int t) {
    check(acclAlltoAll(ptr(s), ptr(r), n, acclDataType_t(t), comm_, nullptr));
  }
  void gather(uintptr_t s, uintptr_t r, size_t n, int t, int root) {
    check(acclGather(ptr(s), ptr(r), n, acclDataType_t(t), root, comm_, nullptr));
  }
  void scatter(uintptr_t s, uintptr_t r, size_t n, int t, int root) {
    check(acclScatter(ptr(s), ptr(r), n, acclDataType_t(t), root, comm_, nullptr));
  }
  void send(uintptr_t b, size_t n, int t, int peer) {
    check(acclSend(ptr(b), n, acclDataType_t(t), peer, comm_, nullptr));
  }
  void recv(uintptr_t b, size_t n, int t, int peer) {
    check(acclRecv(ptr(b), n, acclDataType_t(t), peer, comm_, nullptr));
  }
  void barrier() { check(acclBarrier(comm_, nullptr)); }

  py::object split(int color, int key) {
    acclComm_t nc = nullptr;
    acclResult_t r;
    {
      py::gil_scoped_release nogil;
      r = acclCommSplit(comm_, color, key, &nc, nullptr);
    }
    check(r);
    if (!nc) return py::none();
    return py::cast(Comm(nc));
  }
  void finalize() { check(acclCommFinalize(comm_)); }
  void destroy() { release(false); }
  void abort() { release(true); }
  std::string trace() const {
    size_t size = 0;
    check(acclCommGetTrace(comm_, nullptr, &size));
    std::string buf(size, '\0');
    check(acclCommGetTrace(comm_, &buf[0], &size));
    buf.resize(strlen(buf.c_str()));
    return buf;
  }
  double timeout() const {
    double t;
    check(acclCommGetTimeout(comm_, &t));
    return t;
  }
  void setTimeout(double t) { check(acclCommSetTimeout(comm_, t)); }
  int asyncError() const {
    acclResult_t e;
    check(acclCommGetAsyncError(comm_, &e));
    return e;
  }

  // Back-to-back calls timed here, so the figure holds no Python overhead.
  double timeOp(const std::string& name, uintptr_t s, uintptr_t r, size_t n, int t, int op,
                int root, int iters) {
    // The collective is looked up once: a comparison of names per call would be timed too.
    static const char* const kNames[] = {"all_reduce", "all_gather", "reduce_scatter",
                                         "broadcast",  "reduce",     "alltoall",
                                         "gather",     "scatter",    "sendrecv"};
    const int which = int(std::find(std::begin(kNames), std::end(kNames), name) - kNames);
    if (which == int(std::size(kNames)))
      throw CallError{acclInvalidArgument, "time_op: unknown collective '" + name + "'"};
    void *sp = ptr(s), *rp = ptr(r);
    const acclDataType_t dt = acclDataType_t(t);
    const acclRedOp_t o = acclRedOp_t(op);
    auto once = [&]() -> acclResult_t {
      switch (which) {
        case 0: return acclAllReduce(sp, rp, n, dt, o, comm_, nullptr);
        case 1: return acclAllGather(sp, rp, n, dt, comm_, nullptr);
        case 2: return acclReduceScatter(sp, rp, n, dt, o, comm_, nullptr);
        case 3: return acclBroadcast(sp, rp, n, dt, root, comm_, nullptr);
        case 4: return acclReduce(sp, rp, n, dt, o, root, comm_, nullptr);
        case 5: return acclAlltoAll(sp, rp, n, dt, comm_, nullptr);
        case 6: return acclGather(sp, rp, n, dt, root, comm_, nullptr);
        case 7: return acclScatter(sp, rp, n, dt, root, comm_, nullptr);
        default: {  // sendrecv: to the next rank, from the previous one
          check(acclGroupStart());
          acclResult_t rs = acclSend(sp, n, dt, (me_ + 1) % n_, comm_, nullptr);
          acclResult_t rr = rs ? rs : acclRecv(rp, n, dt, (me_ + n_ - 1) % n_, comm_, nullptr);
          acclResult_t re = acclGroupEnd();  // always closes the group, even after an error
          return rr ? rr : re;
        }
      }
    };
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) check(once());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  static bool same(const ArrayView& a, const ArrayView& b) {
    return a.type() >= 0 && b.type() == a.type() && b.count() == a.count();
  }
  // Runs a C call without the GIL; true, or the call's error raised.
  template <class F>
  static bool run(F call) {
    acclResult_t r;
    {
      py::gil_scoped_release nogil;
      r = call();
    }
    check(r);
    return true;
  }
  void release(bool abort) {
    if (released_) throw CallError{acclInvalidUsage, "the communicator was destroyed"};
    released_ = true;
    check(abort ? acclCommAbort(comm_) : acclCommDestroy(comm_));
  }

  acclComm_t comm_ = nullptr;
  bool released_ = false;
  // This rank and the rank count, fixed for the communicator's life: the *_arrays calls read
  // them here rather than through the C API, whose every call enters and leaves the
  // communicator (two atomic updates).
  int me_ = 0, n_ = 1;
};

// The Python API's calls on plain numpy arrays enter here, as raw CPython functions
// (METH_FASTCALL): the Python checks were most of its cost for a small call (8 bytes, 2 ranks:
// all_reduce 3.7-3.9 us over the C API's call; all_gather, broadcast and reduce_scatter
// 2.1-2.4, more than mpi4py's whole call), and pybind11's dispatch took 0.23 us of what was
// left. Arguments: the Comm (None once destroyed), x and out (None: in place), then the op
// and/or root. Anything but exact numpy arrays and ints is declined (False, nothing done), as
// is all a Comm method declines; the Python layer then checks and reports.
PyTypeObject* ndarrayType = nullptr;  // numpy.ndarray, set when the module is imported

template <int Ints, class F>
PyObject* arraysCall(PyObject* const* args, Py_ssize_t nargs, F call) {
  if (nargs != 3 + Ints) {
    PyErr_Format(PyExc_TypeError, "expected %d arguments, got %zd", 3 + Ints, nargs);
    return nullptr;
  }
  auto array = [](PyObject* o) { return Py_TYPE(o) == ndarrayType; };
  if (args[0] == Py_None || !array(args[1]) || (args[2] != Py_None && !array(args[2])))
    Py_RETURN_FALSE;
  int ints[Ints > 0 ? Ints : 1];
  for (int i = 0; i < Ints; ++i) {
    PyObject* o = args[3 + i];
    int overflow = 0;
    long v = PyLong_CheckExact(o) ? PyLong_AsLongAndOverflow(o, &overflow) : LONG_MAX;
    if (overflow || v < INT_MIN || v > INT_MAX) Py_RETURN_FALSE;
    ints[i] = int(v);
  }
  try {
    return PyBool_FromLong(call(py::handle(args[0]).cast<Comm&>(), args[1], args[2], ints));
  } catch (const CallError& e) {
    setError(e);
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  }
  return nullptr;
}

#define ACCL_ARRAYS(name, ints, body)                                                  \
  PyObject* name(PyObject*, PyObject* const* args, Py_ssize_t nargs) {                 \
    return arraysCall<ints>(args, nargs, [](Comm& c, PyObject* x, PyObject* out,        \
                                            const int* v) { return body; });           \
  }
ACCL_ARRAYS(allReduceArrays, 1, c.allReduceArrays(x, out, v[0]))
ACCL_ARRAYS(broadcastArrays, 1, c.broadcastArrays(x, out, v[0]))
ACCL_ARRAYS(reduceArrays, 2, c.reduceArrays(x, out, v[0], v[1]))
ACCL_ARRAYS(allGatherArrays, 0, c.allGatherArrays(x, out))
ACCL_ARRAYS(reduceScatterArrays, 1, c.reduceScatterArrays(x, out, v[0]))
#undef ACCL_ARRAYS

PyCFunction fastcall(PyObject* (*f)(PyObject*, PyObject* const*, Py_ssize_t)) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}
PyMethodDef arraysFunctions[] = {
    {"all_reduce_arrays", fastcall(allReduceArrays), METH_FASTCALL, nullptr},
    {"broadcast_arrays", fastcall(broadcastArrays), METH_FASTCALL, nullptr},
    {"reduce_arrays", fastcall(reduceArrays), METH_FASTCALL, nullptr},
    {"all_gather_arrays", fastcall(allGatherArrays), METH_FASTCALL, nullptr},
    {"reduce_scatter_arrays", fastcall(reduceScatterArrays), METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

PYBIND11_MODULE(_accl, m) {
  m.doc() = "Private binding of libaccl; use accl.Communicator.";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CallError& e) {
      setError(e);
    }
  });

  m.def("version", [] {
    int v;
    check(acclGetVersion(&v));
    return v;
  });
  m.def("get_unique_id", [] {
    acclUniqueId id;
    check(acclGetUniqueId(&id));
    return py::bytes(id.internal, sizeof(id.internal));
  });
  m.def("group_start", [] { check(acclGroupStart()); });
  m.def("group_end", [] { check(acclGroupEnd()); }, py::call_guard<py::gil_scoped_release>());
  // Shared host memory (acclHostAlloc), exported as a writable byte buffer and freed with the
  // last reference to it.
  py::class_<HostBuffer>(m, "HostBuffer", py::buffer_protocol())
      .def(py::init<size_t>())
      .def_buffer([](HostBuffer& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {b.size()}, {size_t(1)});
      });
  m.def("error_string", [](int code) { return std::string(acclGetErrorString(acclResult_t(code))); });

  ndarrayType = reinterpret_cast<PyTypeObject*>(
      py::object(py::module_::import("numpy").attr("ndarray")).release().ptr());
  if (PyModule_AddFunctions(m.ptr(), arraysFunctions) != 0) throw py::error_already_set();

  using G = py::call_guard<py::gil_scoped_release>;
  py::class_<Comm>(m, "Comm")
      .def(py::init<const py::bytes&, int, int, double, const std::optional<std::string>&>(),
           py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("timeout") = 0.0,
           py::arg("backend") = py::none())
      .def_property_readonly("rank", &Comm::rank)
      .def_property_readonly("size", &Comm::size)
      .def_property_readonly("backend", &Comm::backend)
      .def("all_reduce", &Comm::allReduce, G())
      .def("broadcast", &Comm::broadcast, G())
      .def("reduce", &Comm::reduce, G())
      .def("all_gather", &Comm::allGather, G())
      .def("reduce_scatter", &Comm::reduceScatter, G())
      .def("all_to_all", &Comm::allToAll, G())
      .def("gather", &Comm::gather, G())
      .def("scatter", &Comm::scatter, G())
      .def("send", &Comm::send, G())
      .def("recv", &Comm::recv, G())
      .def("barrier", &Comm::barrier, G())
      .def("split", &Comm::split)
      .def("finalize", &Comm::finalize, G())
      .def("destroy", &Comm::destroy, G())
      .def("abort", &Comm::abort, G())
      .def_property("timeout", &Comm::timeout, &Comm::setTimeout)
      .def("async_error", &Comm::asyncError)
      .def("trace", &Comm::trace)
      .def("time_op", &Comm::timeOp, G());
}
