/* tg's persistent CPU thread pool: runs thread ids 0..n-1 of a kernel, id 0 on the calling thread.
 *
 * Compiled once by the CPU device's C compiler (cached on disk) and loaded with ctypes, which releases the GIL
 * for the whole call. A kernel is called through its entry wrapper `void <name>_entry(const long long* args,
 * int core_id)` (rendered by ClangRenderer), so one pool serves every kernel.
 *
 * Launch: the caller publishes the job and bumps a generation counter; workers spin on the counter (with a pause
 * instruction) for TG_SPIN_NS after their last job, then sleep on a condition variable. Spinning makes
 * back-to-back launches cost about a microsecond; sleeping keeps an idle process from burning a core. The caller
 * waits for the workers by spinning too (its own share of the work takes as long as theirs), yielding the core
 * if a worker was descheduled. One job runs at a time (the Python side holds a lock around tg_pool_run).
 * After fork() the child has no workers: an atfork handler resets the pool, and workers are created again.
 */
#include <pthread.h>
#include <sched.h>
#include <time.h>

#define TG_MAX_WORKERS 255
#define TG_SPIN_NS 100000LL /* how long an idle worker spins before it sleeps */

typedef void (*tg_entry)(const long long *args, int core_id);

static tg_entry job_fn;
static const long long *job_args;
static int job_threads;
static unsigned generation;   /* bumped once per job (atomics below) */
static int pending;           /* workers that have not finished the current job */
static int nworkers, sleepers;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int atfork_installed;
static unsigned start_generation[TG_MAX_WORKERS + 1]; /* the generation before a worker's first job */

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

static void *worker(void *arg) {
  int id = (int)(long)arg;
  unsigned seen = start_generation[id]; /* not the current value: the first job may already be published */
  for (;;) {
    long long spin_start = now_ns();
    unsigned spins = 0, g;
    while ((g = __atomic_load_n(&generation, __ATOMIC_ACQUIRE)) == seen) {
      cpu_relax();
      if ((++spins & 255) == 0 && now_ns() - spin_start > TG_SPIN_NS) {
        pthread_mutex_lock(&mu);
        sleepers++;
        while ((g = __atomic_load_n(&generation, __ATOMIC_ACQUIRE)) == seen) pthread_cond_wait(&wake, &mu);
        sleepers--;
        pthread_mutex_unlock(&mu);
        break;
      }
    }
    seen = g;
    if (id < job_threads) job_fn(job_args, id);
    __atomic_fetch_sub(&pending, 1, __ATOMIC_ACQ_REL);
  }
  return 0;
}

static void reset_after_fork(void) {
  /* the child process has only the thread that forked: forget the workers, re-create the locks */
  nworkers = 0;
  sleepers = 0;
  pending = 0;
  pthread_mutex_init(&mu, 0);
  pthread_cond_init(&wake, 0);
}

/* Start workers until there are n-1 of them; returns how many exist. */
static int ensure_workers(int n) {
  if (!atfork_installed) {
    pthread_atfork(0, 0, reset_after_fork);
    atfork_installed = 1;
  }
  while (nworkers < n - 1 && nworkers < TG_MAX_WORKERS) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    start_generation[nworkers + 1] = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    int err = pthread_create(&t, &attr, worker, (void *)(long)(nworkers + 1));
    pthread_attr_destroy(&attr);
    if (err) break;
    nworkers++;
  }
  return nworkers;
}

/* Run fn(args, t) for t in [0, n): returns the number of threads used (fewer if workers could not start:
 * then the caller runs the missing ids itself, so the result is the same). */
int tg_pool_run(tg_entry fn, const long long *args, int n) {
  int workers = n > 1 ? ensure_workers(n) : 0;
  int used = workers + 1 < n ? workers + 1 : n;
  if (used > 1) {
    job_fn = fn;
    job_args = args;
    job_threads = used;
    __atomic_store_n(&pending, workers, __ATOMIC_RELEASE);
    __atomic_fetch_add(&generation, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&mu);
    if (sleepers) pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&mu);
  }
  fn(args, 0);
  for (int t = used; t < n; t++) fn(args, t); /* ids no worker could take */
  if (used > 1) {
    unsigned spins = 0;
    while (__atomic_load_n(&pending, __ATOMIC_ACQUIRE) > 0) {
      cpu_relax();
      if ((++spins & 1023) == 0) sched_yield(); /* a descheduled worker: give the core away */
    }
  }
  return used;
}

/* Workers currently started (for tests). */
int tg_pool_workers(void) { return nworkers; }
