#pragma once
// What a RackWeave program says when it dies of a fault. Installed first thing in
// main, it catches SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT and writes to stderr
//
//   rw-node: fatal signal SIGSEGV (address 0x18) in thread 41235 (rw-node); backtrace:
//   /usr/lib/x86_64-linux-gnu/libcaf_core.so.0.17.6(+0x1f2a0)[0x7f...]
//   build/apps/rw-node(+0x5c1e3)[0x55...]
//   ...
//
// with async-signal-safe calls only (backtrace(3) is loaded at install, so it does not
// allocate in the handler). Then the signal's default action runs: the exit status
// (139 for SIGSEGV) and a core dump, where the system enables one, stay what they would
// have been. A frame `FILE(+OFFSET)` is resolved with `addr2line -f -C -e FILE OFFSET`.
//
// Not installed in a sanitizer build: the sanitizer's own report is the better one.
// A stack overflow in a thread other than the main one is not reported (the handler
// would need the alternate stack that only the main thread is given).

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RW_CRASH_REPORT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RW_CRASH_REPORT_SANITIZED 1
#endif
#endif

namespace rw::tools {

/// False in a sanitizer build, where install_crash_report leaves the sanitizer's.
#ifdef RW_CRASH_REPORT_SANITIZED
inline constexpr bool crash_report_enabled = false;
#else
inline constexpr bool crash_report_enabled = true;
#endif

/// Installs the handler; `program` (kept, not copied) heads each report.
void install_crash_report(const char* program);

} // namespace rw::tools
