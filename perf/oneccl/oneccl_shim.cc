// A C face on oneCCL's C++ API, for accl-perf's OnecclRunner (python/accl/perf_peers.py), which
// loads it with ctypes. Built by `make oneccl` against the CPU-only static libccl.a of PyPI's
// oneccl-devel wheel, so that nothing of the oneAPI runtime (SYCL, the Intel compiler's
// libraries) is needed. Every function returns 0 on success, 1 where oneCCL has no such call
// (the runner reports N/A) and -1 on an error, whose message oneccl_error() then returns.

#include <oneapi/ccl.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

// libccl.a was built with Intel's compiler, which calls these two from its own runtime
// (libirc) for memcpy and memset; plain memcpy/memset do the same job.
extern "C" void* _intel_fast_memcpy(void* d, const void* s, size_t n) { return memcpy(d, s, n); }
extern "C" void* _intel_fast_memset(void* d, int c, size_t n) { return memset(d, c, n); }

// The pointers of the ITT (VTune) instrumentation that libccl.a calls through. ittnotify's
// callers skip a null pointer, so null ones turn the instrumentation off, as when no collector
// is attached.
extern "C" {
void* __itt_domain_create_ptr__3_0 = nullptr;
void* __itt_event_create_ptr__3_0 = nullptr;
void* __itt_event_end_ptr__3_0 = nullptr;
void* __itt_event_start_ptr__3_0 = nullptr;
void* __itt_metadata_add_ptr__3_0 = nullptr;
void* __itt_string_handle_create_ptr__3_0 = nullptr;
void* __itt_task_begin_ptr__3_0 = nullptr;
void* __itt_task_end_ptr__3_0 = nullptr;
void* __itt_thread_set_name_ptr__3_0 = nullptr;
}

namespace {

std::string last_error;
std::string version;
std::shared_ptr<ccl::kvs> kvs;
std::optional<ccl::communicator> comm;

// accl's acclDataType_t and acclRedOp_t codes (python/accl/_types.py) to oneCCL's.
bool to_dtype(int code, ccl::datatype* out) {
    static const ccl::datatype map[] = {
        ccl::datatype::int8,    ccl::datatype::uint8,   ccl::datatype::int32,
        ccl::datatype::uint32,  ccl::datatype::int64,   ccl::datatype::uint64,
        ccl::datatype::float16, ccl::datatype::float32, ccl::datatype::float64,
        ccl::datatype::bfloat16};  // float8 (10, 11): oneCCL has none
    if (code < 0 || code >= int(sizeof(map) / sizeof(map[0]))) return false;
    *out = map[code];
    return true;
}

bool to_reduction(int code, ccl::reduction* out) {
    static const ccl::reduction map[] = {ccl::reduction::sum, ccl::reduction::prod,
                                         ccl::reduction::max, ccl::reduction::min,
                                         ccl::reduction::avg};
    if (code < 0 || code >= int(sizeof(map) / sizeof(map[0]))) return false;
    *out = map[code];
    return true;
}

// Runs f, turning an exception into -1 and its message.
template <typename F>
int guarded(F&& f) {
    try {
        return f();
    } catch (const std::exception& e) {
        last_error = e.what();
    } catch (...) {
        last_error = "unknown exception";
    }
    return -1;
}

}  // namespace

extern "C" {

const char* oneccl_error() { return last_error.c_str(); }

// oneCCL's version, e.g. "2022.2.0".
const char* oneccl_version() {
    auto v = ccl::get_library_version();
    version = std::to_string(v.major) + "." + std::to_string(v.minor) + "." +
              std::to_string(v.update);
    return version.c_str();
}

// Joins the `size` ranks. oneCCL's ranks meet through a key-value store whose address rank 0
// learns when it creates it; it travels through the file `kvs_path`, written whole (a rename)
// so that a reader never sees half of it, and removed once every rank has joined. A file needs
// no launcher support, and the launcher's ranks share a file system.
int oneccl_init(int rank, int size, const char* kvs_path, double timeout_s) {
    // oneCCL logs its warnings (every CCL_* variable that differs from its default among them)
    // to std::cout, where accl-perf's ranks print their tables: send them to std::cerr instead.
    // Python's own stdout does not go through std::cout.
    std::cout.rdbuf(std::cerr.rdbuf());
    return guarded([&] {
        ccl::init();
        ccl::kvs::address_type addr;
        std::string path(kvs_path);
        if (rank == 0) {
            kvs = ccl::create_main_kvs();
            addr = kvs->get_address();
            std::string tmp = path + ".tmp";
            std::ofstream(tmp, std::ios::binary).write(addr.data(), addr.size());
            if (std::rename(tmp.c_str(), path.c_str()) != 0) {
                last_error = "cannot write " + path;
                return -1;
            }
        } else {
            auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration<double>(timeout_s);
            for (;;) {
                std::ifstream f(path, std::ios::binary);
                if (f.read(addr.data(), addr.size())) break;
                if (std::chrono::steady_clock::now() > deadline) {
                    last_error = "rank 0 wrote no oneCCL address to " + path + " in time";
                    return -1;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            kvs = ccl::create_kvs(addr);
        }
        comm = ccl::create_communicator(size, rank, kvs);
        // Every rank has read the file before it could join, so rank 0 may remove it now.
        if (rank == 0) std::remove(path.c_str());
        return 0;
    });
}

// Times `iters` calls of the collective `name` from a barrier, into *seconds. The arguments
// are those of NCCL's call: count per rank as NCCL counts it, the root for rooted ones.
int oneccl_time(const char* name, const void* src, void* out, size_t count, int dtype, int op,
                int root, int iters, double* seconds) {
    ccl::datatype dt;
    ccl::reduction red;
    if (!to_dtype(dtype, &dt) || !to_reduction(op, &red)) return 1;
    std::string c(name);
    void* in = const_cast<void*>(src);  // oneCCL's broadcast and send take a non-const buffer
    const ccl::communicator& cm = *comm;
    int me = cm.rank(), n = cm.size();
    std::function<void()> once;
    if (c == "all_reduce") {
        once = [&] { ccl::allreduce(src, out, count, dt, red, cm).wait(); };
    } else if (c == "all_gather") {
        once = [&] { ccl::allgather(src, out, count, dt, cm).wait(); };
    } else if (c == "reduce_scatter") {
        once = [&] { ccl::reduce_scatter(src, out, count, dt, red, cm).wait(); };
    } else if (c == "broadcast") {
        once = [&] { ccl::broadcast(in, out, count, dt, root, cm).wait(); };
    } else if (c == "reduce") {
        once = [&] { ccl::reduce(src, out, count, dt, red, root, cm).wait(); };
    } else if (c == "alltoall") {
        once = [&] { ccl::alltoall(src, out, count, dt, cm).wait(); };
    } else if (c == "gather") {
        once = [&] { ccl::gather(src, out, count, dt, root, cm).wait(); };
    } else if (c == "scatter") {
        once = [&] { ccl::scatter(src, out, count, dt, root, cm).wait(); };
    } else if (c == "sendrecv") {
        once = [&] {  // both calls return at once (oneCCL's events), so neither waits first
            auto s = ccl::send(in, count, dt, (me + 1) % n, cm);
            auto r = ccl::recv(out, count, dt, (me - 1 + n) % n, cm);
            s.wait();
            r.wait();
        };
    } else {
        return 1;
    }
    return guarded([&] {
        ccl::barrier(cm).wait();
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) once();
        *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return 0;
    });
}

// x reduced over the ranks with accl's op code (the harness's max and sum), in place.
int oneccl_reduce_double(double* x, int op) {
    ccl::reduction red;
    if (!to_reduction(op, &red)) return 1;
    return guarded([&] {
        ccl::allreduce(x, x, 1, ccl::datatype::float64, red, *comm).wait();
        return 0;
    });
}

void oneccl_finalize() {
    comm.reset();
    kvs.reset();
}

}  // extern "C"
