/* Spin-waiting helpers shared by the native worker threads (backends/cpu_pool.c, hcq/hcq_worker.c): a CPU pause
 * hint for busy-wait loops and a monotonic clock in nanoseconds to bound them. Included textually by
 * tg.runtime.c_compiler.c_source (the compilers take source text, not paths). */
#include <time.h>

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
