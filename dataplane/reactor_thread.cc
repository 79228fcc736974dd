#include "dataplane/reactor_thread.h"

#include <pthread.h>
#include <sched.h>

#include "net/burst.h"
#include "spdlog/spdlog.h"

namespace infergate::dataplane {

void ReactorThread::enterLoopThread(const std::string& name, int cpu) {
  thread_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  net::markBurstThread();  // the loop calls net::runBurstEnd() after every iteration
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    spdlog::warn("{} {}: cannot pin to CPU {}; running unpinned", name, index_, cpu);
  }
}

}  // namespace infergate::dataplane
