/* tg's persistent CPU thread pool: runs the thread ids 0..n-1 of a kernel on up to `threads` OS threads, the
 * calling thread included.
 *
 * Compiled once by the CPU device's C compiler (cached on disk) and loaded with ctypes, which releases the GIL
 * for the whole call. A kernel is called through its entry wrapper `void <name>_entry(const long long* args,
 * int core_id)` (rendered by ClangRenderer), so one pool serves every kernel.
 *
 * A launch publishes the job and starts a new generation in `state`; workers spin on it (with a pause
 * instruction) for TG_SPIN_NS after their last job, then sleep on a condition variable. Spinning makes
 * back-to-back launches cost about a microsecond; sleeping keeps an idle process from burning a core. 1 ms
 * outlasts the Python an eager loop runs between two kernels (100 us did not: a 256^3 matmul loop paid a wake-up
 * per step).
 * Ids are handed out one at a time from an atomic counter, and a worker only takes part if it joins the job
 * before the caller has handed out every id: so when another process holds a core, the caller (and the other
 * workers) run the ids that core would have run, and nobody waits for a worker that is not scheduled.
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

static void *worker(void *arg) {
  int id = (int)(long)arg;
  unsigned seen = start_generation[id]; /* not the current value: the first job may already be published */
  for (;;) {
    long long spin_start = now_ns();
    unsigned spins = 0;
    while (current_generation() == seen) {
      cpu_relax();
      if ((++spins & 255) == 0 && now_ns() - spin_start > TG_SPIN_NS) {
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
 * number of workers the job was offered to. */
int tg_pool_run(tg_entry fn, const long long *args, int n, int threads) {
  pthread_mutex_lock(&job_mu);
  if (threads > n) threads = n;
  int workers = threads > 1 ? ensure_workers(threads) : 0;
  job_fn = fn;
  job_args = args;
  job_ids = n;
  __atomic_store_n(&job_next, 0, __ATOMIC_RELEASE);
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
  pthread_mutex_unlock(&job_mu);
  return workers;
}

/* Workers currently started (for tests). */
int tg_pool_workers(void) { return nworkers; }
