// Every environment variable the C library reads, declared once: name, default, documentation.
// docs/environment.md lists the same table; `python -m accl.info` prints the values in effect.
#pragma once

#include <string>

#define ACCL_PARAMS(X)                                                                         \
  X(Debug, "ACCL_DEBUG", "WARN", "Log level on stderr: NONE, WARN, INFO or TRACE.")             \
  X(DebugSubsys, "ACCL_DEBUG_SUBSYS", "ALL",                                                   \
    "Comma-separated subsystems to log (INIT, BOOTSTRAP, SHM, NET, COLL, P2P), or ALL.")       \
  X(Backend, "ACCL_BACKEND", "",                                                               \
    "Backend for communicators whose config names none: a name (cpu, nccl, ...; plugins are "  \
    "found as libaccl-backend-<name>.so next to libaccl.so, then on the library path). Unset: "\
    "the backend follows the buffers' memory: cpu, or nccl for CUDA device memory (the first " \
    "collective's buffers choose when a rank's process has loaded CUDA).")                    \
  X(BackendPlugin, "ACCL_BACKEND_PLUGIN", "",                                                  \
    "Path of a backend plugin library; when set, it is the default backend.")                  \
  X(Timeout, "ACCL_TIMEOUT", "600",                                                            \
    "Seconds any call may block before it fails with acclTimeout.")                            \
  X(CommId, "ACCL_COMM_ID", "",                                                                \
    "host:port where rank 0 hosts the rendezvous, instead of the process that called "         \
    "acclGetUniqueId (for launchers with no side channel).")                                   \
  X(CommSecret, "ACCL_COMM_SECRET", "",                                                        \
    "Shared secret for ACCL_COMM_ID mode; all ranks must see the same value.")                 \
  X(SocketIfname, "ACCL_SOCKET_IFNAME", "",                                                    \
    "Network interfaces for the bootstrap and the TCP transport, as NCCL_SOCKET_IFNAME: a "    \
    "comma list of name prefixes (eth,ens), ^ to exclude them (^docker,lo), = for exact names " \
    "(=eth0); default: the first up, non-loopback interface, else loopback.")                   \
  X(SocketFamily, "ACCL_SOCKET_FAMILY", "",                                                    \
    "AF_INET or AF_INET6: the only address family used; default: IPv4 first, then IPv6.")       \
  X(SocketNsocks, "ACCL_SOCKET_NSOCKS", "2",                                                   \
    "TCP connections per pair of ranks on different nodes; messages of 256 KiB and more are "   \
    "split across them.")                                                                      \
  X(Heartbeat, "ACCL_HEARTBEAT", "1",                                                           \
    "Seconds between the heartbeats a rank sends each peer on another node (a byte on a "      \
    "connection of its own, from a thread of the communicator); 0: none.")                     \
  X(HeartbeatTimeout, "ACCL_HEARTBEAT_TIMEOUT", "20",                                           \
    "Seconds without a heartbeat after which a rank waiting on a peer on another node fails "  \
    "with acclRemoteError naming it (its process stopped or hung, its host or link down); on " \
    "one node, how long an awaited peer's process may stay stopped (SIGSTOP).")                \
  X(HostId, "ACCL_HOSTID", "",                                                                 \
    "This process's host identity; ranks with the same one share memory. Default: the host "   \
    "name and /proc/sys/kernel/random/boot_id.")                                               \
  X(Algo, "ACCL_ALGO", "",                                                                     \
    "Forces an algorithm: a list of collective:algorithm items separated by ; or , "          \
    "(allreduce:ring, broadcast:hiertree, ...; docs/environment.md lists them); default: by "   \
    "node count and size.")                                                                    \
  X(ShmSlotBytes, "ACCL_SHM_SLOT_BYTES", "0",                                                  \
    "Bytes of shared-memory staging per rank and buffer (two buffers per rank); 0: 16 MiB "    \
    "divided by the rank count, between 1 and 4 MiB.")                                          \
  X(ShmP2pBytes, "ACCL_SHM_P2P_BYTES", "262144",                                               \
    "Bytes of each of the two shared-memory buffers per ordered pair of ranks for send/recv.") \
  X(SpinUs, "ACCL_SPIN_US", "50",                                                              \
    "Microseconds a wait spins before it yields the CPU, then sleeps (with more ranks than "  \
    "cores: none, but up to 2 for a box's writer bound to other CPUs).")                      \
  X(Check, "ACCL_CHECK", "0",                                                                  \
    "1: before each collective, ranks compare the call, count, type, op and root, and fail "   \
    "with acclInvalidUsage naming the first rank that disagrees (costs a TCP round trip).")     \
  X(TraceBuffer, "ACCL_TRACE_BUFFER", "1000",                                                  \
    "Operations each communicator's flight recorder keeps, at least: rounded up to a power "   \
    "of two (0 turns it off).")                                                                \
  X(TraceDir, "ACCL_TRACE_DIR", "",                                                            \
    "Directory where a communicator dumps its flight recorder as JSON on a timeout or a dead "  \
    "peer (accl-trace-<comm>-rank<r>.json); read the dumps with python -m accl.trace DIR.")     \
  X(Compose, "ACCL_COMPOSE", "",                                                               \
    "Collectives the core builds from send/recv even where the backend has them (comma list "  \
    "of broadcast, gather, scatter, alltoall, barrier, or all): for testing composition.")      \
  X(CmaMin, "ACCL_CMA_MIN", "",                                                                \
    "Smallest message (bytes per rank) that all-reduce, all-gather, reduce-scatter and "       \
    "broadcast copy once, straight between the ranks' memory (process_vm_readv/writev), "      \
    "instead of through /dev/shm: one size for all four, or collective:size items (e.g. "      \
    "allreduce:32768,allgather:16384); -1: never; unset or 0: the measured crossovers "        \
    "(docs/algorithms.md).")                                                                    \
  X(AllReduceDirectMax, "ACCL_ALLREDUCE_DIRECT_MAX", "16384",                                  \
    "Largest all-reduce (bytes) for the direct algorithm; larger ones reduce-scatter then "    \
    "all-gather through shared memory.")                                                       \
  X(TuningFile, "ACCL_TUNING_FILE", "",                                                        \
    "File of NAME=VALUE lines (accl-tune writes one) for ACCL_* variables the environment "    \
    "does not set; unset: $XDG_CONFIG_HOME/accl/tuning.conf (~/.config/accl/tuning.conf) if "  \
    "it exists; none: no file.")

namespace accl {

enum class Param {
#define ACCL_PARAM_ENUM(id, name, def, doc) id,
  ACCL_PARAMS(ACCL_PARAM_ENUM)
#undef ACCL_PARAM_ENUM
};

// The value from the environment, else from the tuning file (ACCL_TUNING_FILE), else the
// default. Read at each call, so a process may change the environment between communicators;
// a tuning file is read once per path.
std::string paramString(Param p);
// The tuning file in effect ("" when none). Throws acclInvalidArgument if it cannot be read or
// holds a line that does not set a known variable (paramString then ignores the whole file).
// Called when a communicator is made, so that a broken file fails there, not in whichever
// read of a variable came first.
std::string checkTuningFile();
// The variable's name, e.g. "ACCL_ALGO".
const char* paramName(Param p);
// Throws acclInvalidArgument naming the variable when the value does not parse.
long long paramInt(Param p);
double paramDouble(Param p);

}  // namespace accl
