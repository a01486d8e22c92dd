/* tg's persistent CPU thread pool: runs the thread ids 0..n-1 of a kernel on up to `threads` OS threads, the
 * calling thread included.
 *
 * Compiled once by the CPU device's C compiler (cached on disk) and loaded with ctypes, which releases the GIL
 * for the whole call. A kernel is called through its entry wrapper `void <name>_entry(const long long* args,
 * int core_id)` (rendered by ClangRenderer), so one pool serves every kernel.
 *
 * A launch publishes the job and starts a new generation in `state`; workers spin on it (with a pause
 * instruction) for TG_SPIN_NS after their last job (less once the caller runs kernels alone, see solo_streak),
 * then sleep on a condition variable. Spinning makes
 * back-to-back launches cost about a microsecond; sleeping keeps an idle process from burning a core. 1 ms
 * outlasts the Python an eager loop runs between two kernels (100 us did not: a 256^3 matmul loop paid a wake-up
 * per step).
 * Ids are handed out one at a time from an atomic counter, and a worker only takes part if it joins the job
 * before the caller has handed out every id: so when another process holds a core, the caller (and the other
 * workers) run the ids that core would have run, and nobody waits for a worker that is not scheduled.
 * Threads pay only while the process gets more than one core, though. A worker that took an id and was then
 * descheduled cannot be robbed of it: the caller waits until it runs again. And where other processes keep the cores
 * busy, a process's threads share that process's slice of the machine (Linux's autogroup schedules each session as
 * one entity), so a spinning worker takes time from the caller. On the shared 2-core box at load ~12 a decode token's
 * kernels (summed medians) took 230-265 ms with 2 threads and 154-189 ms on the caller alone, while on a quiet
 * moment 2 threads were faster. So the pool times each kernel's launches both ways and runs it the way that has been
 * faster lately (see "choosing" below). Which thread runs an id never changes what the id computes: same results.
 * One job runs at a time: tg_pool_run holds `job_mu` (callers are the Python side and the HCQ+CPU queue workers,
 * which launch from their own threads). After fork() the child has no
 * workers: an atfork handler resets the pool, and workers are created again.
 */
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include "tg_spin.h" /* cpu_relax, now_ns */

#define TG_MAX_WORKERS 255
#define TG_SPIN_NS 1000000LL /* how long an idle worker spins before it sleeps */
#define TG_SOLO_SLEEP 2      /* solo launches in a row after which idle workers sleep at once */

typedef void (*tg_entry)(const long long *args, int core_id);

/* state = generation << 32 | CLOSED | workers inside the current job; changed atomically */
#define ST_GEN(s) ((unsigned)((s) >> 32))
#define ST_CLOSED (1ULL << 31)
#define ST_COUNT(s) ((s) & 0x7fffffffULL)
static unsigned long long state;

static tg_entry job_fn;
static const long long *job_args;
static int job_ids;  /* ids of the current job */
static int job_next; /* the next id to hand out (atomic) */
static int nworkers, sleepers;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER; /* one job at a time, whoever launches it */
static int atfork_installed;
static unsigned start_generation[TG_MAX_WORKERS + 1]; /* the generation before a worker's first job */

static inline unsigned current_generation(void) { return ST_GEN(__atomic_load_n(&state, __ATOMIC_ACQUIRE)); }

static void run_ids(void) {
  int t;
  while ((t = __atomic_fetch_add(&job_next, 1, __ATOMIC_ACQ_REL)) < job_ids) job_fn(job_args, t);
}

/* Choosing, per kernel, between offering a launch to the workers ("threaded") and running it on the caller alone
 * ("solo"): each kernel (entry function) keeps a running estimate of its launch time in both modes, and runs in the
 * faster one, except every TG_EXPLORE-th launch, which runs in the other so that its estimate follows the machine's
 * load. A kernel's first launches try threaded, then solo. Estimates are moving averages (weight 1/4) of wall times,
 * each sample capped at 4x the estimate so that one launch that was descheduled for a whole time slice does not
 * decide the next hundred. Only tg_pool_run touches these, under job_mu. */
#define TG_KERNEL_SLOTS 1024 /* kernels remembered, by entry address (open addressing) */
#define TG_PROBES 8          /* slots a lookup tries before it takes over the kernel's first slot */
#define TG_EXPLORE 16
typedef struct {
  tg_entry fn;
  long long est_ns[2]; /* [0] solo, [1] threaded; 0 = not measured yet */
  unsigned launches;
} kernel_timing;
static kernel_timing timings[TG_KERNEL_SLOTS];
static long long launches_threaded, launches_solo; /* counters for tests and benchmarks */
/* Solo launches since the last threaded one. Read by spinning workers: when the caller runs kernels alone, the next
 * threaded launch may be many launches away, and a worker spinning for it would take the caller's share of the CPU. */
static int solo_streak;

/* The timing slot of a kernel, made on first use when `create` (null without it when the kernel has none). When its
 * TG_PROBES slots are taken by other kernels, the first is reset and given to this one: lookups stay bounded, and a
 * forgotten kernel only times both ways again. (A kernel unloaded and another loaded at its address inherits its
 * estimates until they adapt; that changes speed, never results.) */
static kernel_timing *timing_of(tg_entry fn, int create) {
  unsigned long long h = ((unsigned long long)(size_t)fn >> 4) * 0x9E3779B97F4A7C15ULL >> 32;
  for (unsigned i = 0; i < TG_PROBES; i++) {
    kernel_timing *k = &timings[(h + i) % TG_KERNEL_SLOTS];
    if (k->fn == fn) return k;
    if (!k->fn) {
      if (create) k->fn = fn;
      return create ? k : 0;
    }
  }
  if (!create) return 0;
  kernel_timing *k = &timings[h % TG_KERNEL_SLOTS];
  *k = (kernel_timing){fn, {0, 0}, 0};
  return k;
}

/* 1 to offer this launch of a kernel to the workers, 0 to run it on the caller alone */
static int choose_threaded(kernel_timing *k) {
  if (!k) return 1;
  if (!k->est_ns[1]) return 1;
  if (!k->est_ns[0]) return 0;
  int faster = k->est_ns[1] < k->est_ns[0];
  return ++k->launches % TG_EXPLORE == 0 ? !faster : faster;
}

static void record_time(kernel_timing *k, int threaded, long long ns) {
  if (!k) return;
  long long *est = &k->est_ns[threaded];
  if (ns < 1) ns = 1;
  if (!*est) {
    *est = ns;
    return;
  }
  if (ns > 4 * *est) ns = 4 * *est;
  *est += (ns - *est) / 4;
  if (*est < 1) *est = 1;
}

static void *worker(void *arg) {
  int id = (int)(long)arg;
  unsigned seen = start_generation[id]; /* not the current value: the first job may already be published */
  for (;;) {
    long long spin_start = now_ns();
    unsigned spins = 0;
    while (current_generation() == seen) {
      cpu_relax();
      if ((++spins & 255) == 0 && (now_ns() - spin_start > TG_SPIN_NS ||
                                   __atomic_load_n(&solo_streak, __ATOMIC_RELAXED) >= TG_SOLO_SLEEP)) {
        pthread_mutex_lock(&mu);
        sleepers++;
        while (current_generation() == seen) pthread_cond_wait(&wake, &mu);
        sleepers--;
        pthread_mutex_unlock(&mu);
        break;
      }
    }
    /* join the newest job unless it is closed (every id handed out: nothing left to do) */
    unsigned long long s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    for (;;) {
      if (s & ST_CLOSED) break;
      if (__atomic_compare_exchange_n(&state, &s, s + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        run_ids();
        __atomic_fetch_sub(&state, 1, __ATOMIC_ACQ_REL);
        break;
      }
    }
    seen = ST_GEN(s);
  }
  return 0;
}

static void reset_after_fork(void) {
  /* the child process has only the thread that forked: forget the workers, re-create the locks */
  nworkers = 0;
  sleepers = 0;
  __atomic_store_n(&state, (unsigned long long)current_generation() << 32, __ATOMIC_RELEASE);
  pthread_mutex_init(&mu, 0);
  pthread_mutex_init(&job_mu, 0);
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
    start_generation[nworkers + 1] = current_generation();
    int err = pthread_create(&t, &attr, worker, (void *)(long)(nworkers + 1));
    pthread_attr_destroy(&attr);
    if (err) break;
    nworkers++;
  }
  return nworkers;
}

/* Run fn(args, t) once for every t in [0, n) on up to `threads` threads (the caller is one of them); returns the
 * number of workers the job was offered to (0 when it ran on the caller alone). */
int tg_pool_run(tg_entry fn, const long long *args, int n, int threads) {
  pthread_mutex_lock(&job_mu);
  if (threads > n) threads = n;
  kernel_timing *timing = threads > 1 ? timing_of(fn, 1) : 0;
  int threaded = threads > 1 && choose_threaded(timing);
  int workers = threaded ? ensure_workers(threads) : 0;
  job_fn = fn;
  job_args = args;
  job_ids = n;
  __atomic_store_n(&job_next, 0, __ATOMIC_RELEASE);
  long long start = now_ns();
  if (workers) { /* a new generation, open, nobody inside yet */
    __atomic_store_n(&state, (unsigned long long)(current_generation() + 1) << 32, __ATOMIC_RELEASE);
    pthread_mutex_lock(&mu);
    if (sleepers) pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&mu);
  }
  run_ids();
  if (workers) { /* close the job, then wait for the workers that joined it to finish their ids */
    __atomic_fetch_or(&state, ST_CLOSED, __ATOMIC_ACQ_REL);
    unsigned spins = 0;
    while (ST_COUNT(__atomic_load_n(&state, __ATOMIC_ACQUIRE)) > 0) {
      cpu_relax();
      if ((++spins & 1023) == 0) sched_yield(); /* a descheduled worker holds an id: give the core away */
    }
  }
  if (threads > 1) {
    record_time(timing, workers > 0, now_ns() - start);
    if (workers) launches_threaded++;
    else launches_solo++;
    __atomic_store_n(&solo_streak, workers ? 0 : solo_streak + 1, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&job_mu);
  return workers;
}

/* Workers currently started (for tests). */
int tg_pool_workers(void) { return nworkers; }

/* Launch counters, for tests and benchmarks: out[0] launches of multi-id kernels offered to the workers, out[1] those
 * run on the caller alone because that had been faster for the kernel; out[2], out[3] the kernel's current solo and
 * threaded estimates in ns (0: not measured yet) when fn is not null. */
void tg_pool_stats(tg_entry fn, long long out[4]) {
  pthread_mutex_lock(&job_mu);
  out[0] = launches_threaded;
  out[1] = launches_solo;
  kernel_timing *k = fn ? timing_of(fn, 0) : 0;
  out[2] = k ? k->est_ns[0] : 0;
  out[3] = k ? k->est_ns[1] : 0;
  pthread_mutex_unlock(&job_mu);
}
