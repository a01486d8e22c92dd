/* The HCQ+CPU queue worker: one native thread per queue executes the encoded commands of a ring.
 *
 * Compiled once by the CPU device's C compiler (disk-cached) and loaded with ctypes. A queue is a ring of RING_SLOTS
 * entries of CMD_WORDS uint64 words and a state block of uint64 words (see the ST_* offsets) in host memory the
 * Python side allocates. The host (the submitter program) copies entries into the ring, then bumps `put` after a
 * release fence; the worker runs entries until `done` reaches `put`, storing `done` after each one (release): the
 * host reads `done` as the queue's read pointer, so a ring slot is rewritten only after its command finished.
 *
 * Commands (word 0 = kind):
 *   1 KERNEL    fn, threads, args...  fn(args, 0), or tg_pool_run(fn, args, threads, cores) when threads > 1
 *   2 MEMCPY    dst, src, nbytes
 *   3 SIGNAL    addr, value           release store of the u64 value (and a futex wake if anyone sleeps on signals)
 *   4 WAIT      addr, value           acquire spin until (u32)*addr >= value, futex sleep after SPIN_NS
 *   5 TIMESTAMP addr                  CLOCK_MONOTONIC nanoseconds into addr
 * An unknown kind stops the worker with `error` = 1 and `error_word` = the kind; the host raises it at its next wait.
 *
 * Idle: after SPIN_NS without work the worker sets `sleeping` and futex-waits on `put` (100 ms timeout, so a lost
 * wake-up costs at most that); tg_worker_kick wakes it only when `sleeping` is set. `abort` makes the worker exit
 * (also from inside a WAIT that never completes: a hung queue is abandoned so). Without futexes (not Linux) the
 * worker and the waits poll with short sleeps.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <sched.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "tg_spin.h" /* cpu_relax, now_ns */
#endif

#define RING_SLOTS 16384
#define CMD_WORDS 64
#define SPIN_NS 20000LL

/* state block: uint64 words */
#define ST_PUT 0
#define ST_DONE 1
#define ST_SLEEPING 2
#define ST_ABORT 3
#define ST_ERROR 4
#define ST_ERROR_WORD 5
#define ST_WAIT_ADDR 6 /* the WAIT in progress (0: none), for hang messages */
#define ST_WAIT_VALUE 7
#define ST_EXITED 8
#define ST_WORDS 16

typedef void (*tg_entry)(const uint64_t *args, int core_id);
typedef int (*tg_pool_run_fn)(tg_entry fn, const uint64_t *args, int n, int threads);

typedef struct {
  uint64_t *state;
  uint64_t *ring;
  tg_pool_run_fn pool_run;
  int cores;
} tg_worker;

static int signal_waiters; /* threads asleep on some signal: SIGNAL wakes only when this is nonzero */

static void sleep_on(uint64_t *addr, uint32_t seen, long long timeout_ns) {
#ifdef __linux__
  struct timespec ts = {timeout_ns / 1000000000LL, timeout_ns % 1000000000LL};
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, seen, &ts, 0, 0);
#else
  (void)addr; (void)seen;
  struct timespec ts = {0, timeout_ns < 50000 ? timeout_ns : 50000};
  nanosleep(&ts, 0);
#endif
}

static void wake_all(uint64_t *addr) {
#ifdef __linux__
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, 0x7fffffff, 0, 0, 0);
#else
  (void)addr;
#endif
}

static inline int reached(uint64_t *addr, uint64_t value) {
  return (uint32_t)__atomic_load_n(addr, __ATOMIC_ACQUIRE) >= (uint32_t)value;
}

/* Wait until (u32)*addr >= value; spin first, then sleep on the signal. Returns 0, or 1 when `abort` is set. */
static int wait_signal(uint64_t *addr, uint64_t value, uint64_t *abort) {
  long long start = now_ns();
  unsigned spins = 0;
  while (!reached(addr, value)) {
    if (__atomic_load_n(abort, __ATOMIC_ACQUIRE)) return 1;
    cpu_relax();
    if ((++spins & 255) == 0 && now_ns() - start > SPIN_NS) {
      __atomic_fetch_add(&signal_waiters, 1, __ATOMIC_SEQ_CST);
      while (!reached(addr, value) && !__atomic_load_n(abort, __ATOMIC_ACQUIRE))
        sleep_on(addr, (uint32_t)__atomic_load_n(addr, __ATOMIC_ACQUIRE), 10000000LL);
      __atomic_fetch_sub(&signal_waiters, 1, __ATOMIC_SEQ_CST);
    }
  }
  return 0;
}

static int run_command(tg_worker *w, uint64_t *e) {
  switch (e[0]) {
  case 1: { /* KERNEL */
    tg_entry fn = (tg_entry)(uintptr_t)e[1];
    int threads = (int)e[2];
    if (threads > 1 && w->pool_run) w->pool_run(fn, &e[3], threads, w->cores);
    else if (threads > 1) for (int t = 0; t < threads; t++) fn(&e[3], t);
    else fn(&e[3], 0);
    return 0;
  }
  case 2: /* MEMCPY */
    memcpy((void *)(uintptr_t)e[1], (const void *)(uintptr_t)e[2], (size_t)e[3]);
    return 0;
  case 3: /* SIGNAL */
    __atomic_store_n((uint64_t *)(uintptr_t)e[1], e[2], __ATOMIC_RELEASE);
    if (__atomic_load_n(&signal_waiters, __ATOMIC_SEQ_CST)) wake_all((uint64_t *)(uintptr_t)e[1]);
    return 0;
  case 4: { /* WAIT */
    uint64_t *addr = (uint64_t *)(uintptr_t)e[1];
    if (reached(addr, e[2])) return 0;
    w->state[ST_WAIT_VALUE] = e[2];
    __atomic_store_n(&w->state[ST_WAIT_ADDR], e[1], __ATOMIC_RELEASE);
    int aborted = wait_signal(addr, e[2], &w->state[ST_ABORT]);
    __atomic_store_n(&w->state[ST_WAIT_ADDR], 0, __ATOMIC_RELEASE);
    return aborted ? -1 : 0;
  }
  case 5: /* TIMESTAMP */
    __atomic_store_n((uint64_t *)(uintptr_t)e[1], (uint64_t)now_ns(), __ATOMIC_RELEASE);
    return 0;
  default:
    w->state[ST_ERROR_WORD] = e[0];
    __atomic_store_n(&w->state[ST_ERROR], 1, __ATOMIC_RELEASE);
    return 1;
  }
}

static void *worker_main(void *arg) {
  tg_worker w = *(tg_worker *)arg;
  free(arg);
#if defined(__linux__) && defined(SCHED_BATCH)
  /* a woken worker must not preempt the host thread that kicked it (the host goes on submitting); it runs as soon as
   * a core is free, which it is whenever the host waits for it */
  struct sched_param sp = {0};
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
#endif
  uint64_t *st = w.state;
  uint64_t cur = __atomic_load_n(&st[ST_DONE], __ATOMIC_ACQUIRE);
  for (;;) {
    if (__atomic_load_n(&st[ST_ABORT], __ATOMIC_ACQUIRE)) break;
    uint64_t put = __atomic_load_n(&st[ST_PUT], __ATOMIC_ACQUIRE);
    if (cur == put) {
      long long start = now_ns();
      unsigned spins = 0;
      while (__atomic_load_n(&st[ST_PUT], __ATOMIC_ACQUIRE) == cur && !__atomic_load_n(&st[ST_ABORT], __ATOMIC_ACQUIRE)) {
        cpu_relax();
        if ((++spins & 255) == 0 && now_ns() - start > SPIN_NS) {
          __atomic_store_n(&st[ST_SLEEPING], 1, __ATOMIC_SEQ_CST);
          uint64_t seen = __atomic_load_n(&st[ST_PUT], __ATOMIC_SEQ_CST);
          if (seen == cur) sleep_on(&st[ST_PUT], (uint32_t)seen, 100000000LL);
          __atomic_store_n(&st[ST_SLEEPING], 0, __ATOMIC_SEQ_CST);
          start = now_ns();
        }
      }
      continue;
    }
    uint64_t *e = &w.ring[(cur % RING_SLOTS) * CMD_WORDS];
    int rc = run_command(&w, e);
    if (rc < 0) break;                                                   /* aborted inside a WAIT */
    if (rc > 0) { while (!__atomic_load_n(&st[ST_ABORT], __ATOMIC_ACQUIRE)) sleep_on(&st[ST_ABORT], 0, 100000000LL); break; }
    cur++;
    __atomic_store_n(&st[ST_DONE], cur, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&st[ST_EXITED], 1, __ATOMIC_RELEASE);
  return 0;
}

/* Start a worker thread on (state, ring); returns 0 on success. */
int tg_worker_start(uint64_t *state, uint64_t *ring, void *pool_run, int cores) {
  tg_worker *w = (tg_worker *)malloc(sizeof(tg_worker));
  if (!w) return -1;
  w->state = state;
  w->ring = ring;
  w->pool_run = (tg_pool_run_fn)pool_run;
  w->cores = cores;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&t, &attr, worker_main, w);
  pthread_attr_destroy(&attr);
  if (err) free(w);
  return err;
}

/* After the host bumped `put`: wake the worker if it sleeps. */
void tg_worker_kick(uint64_t *state) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&state[ST_SLEEPING], __ATOMIC_SEQ_CST)) wake_all(&state[ST_PUT]);
}

/* Make a worker exit (a hung queue): it leaves any WAIT it is in. */
void tg_worker_abort(uint64_t *state) {
  __atomic_store_n(&state[ST_ABORT], 1, __ATOMIC_SEQ_CST);
  wake_all(&state[ST_PUT]);
  wake_all(&state[ST_ABORT]);
}

/* Host wait: until (u32)*addr >= value or timeout_ns passed (spinning spin_ns first, then sleeping on the signal).
 * Returns the value seen last. ctypes releases the GIL around it. */
uint64_t tg_wait_signal(uint64_t *addr, uint64_t value, long long spin_ns, long long timeout_ns) {
  long long start = now_ns();
  unsigned spins = 0;
  int sleeping = 0;
  while (!reached(addr, value)) {
    long long t = now_ns() - start;
    if (t > timeout_ns) break;
    if (t < spin_ns) { cpu_relax(); continue; }
    if (!sleeping) { __atomic_fetch_add(&signal_waiters, 1, __ATOMIC_SEQ_CST); sleeping = 1; }
    if (reached(addr, value)) break;
    long long left = timeout_ns - t;
    sleep_on(addr, (uint32_t)__atomic_load_n(addr, __ATOMIC_ACQUIRE), left < 10000000LL ? left : 10000000LL);
    (void)spins;
  }
  if (sleeping) __atomic_fetch_sub(&signal_waiters, 1, __ATOMIC_SEQ_CST);
  return __atomic_load_n(addr, __ATOMIC_ACQUIRE);
}
