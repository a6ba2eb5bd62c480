// Runs make(seed) for the seeds [begin, end) on worker threads and hands the results out in
// seed order, never more than `window` seeds ahead of the consumer (which bounds memory).
// Host only; plain C++17.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace vxqa_sweep {

template <class T>
class OrderedWorkers {
 public:
  // `make` must not throw.
  OrderedWorkers(uint64_t begin, uint64_t end, int threads, uint64_t window,
                 std::function<T(uint64_t)> make)
      : next_claim_(begin), next_out_(begin), end_(end), window_(window), make_(std::move(make)) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  OrderedWorkers(const OrderedWorkers&) = delete;
  OrderedWorkers& operator=(const OrderedWorkers&) = delete;
  ~OrderedWorkers() {  // stops early if the consumer quits before the end
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // The next seed's result; false after the last.
  bool next(T* out) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (next_out_ >= end_) return false;
    changed_.wait(lock, [this] { return ready_.count(next_out_) > 0; });
    auto it = ready_.find(next_out_);
    *out = std::move(it->second);
    ready_.erase(it);
    ++next_out_;
    changed_.notify_all();
    return true;
  }

 private:
  void work() {
    for (;;) {
      uint64_t seed;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] {
          return stop_ || next_claim_ >= end_ || next_claim_ < next_out_ + window_;
        });
        if (stop_ || next_claim_ >= end_) return;
        seed = next_claim_++;
      }
      T result = make_(seed);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.emplace(seed, std::move(result));
      }
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t next_claim_, next_out_;
  const uint64_t end_, window_;
  bool stop_ = false;
  std::map<uint64_t, T> ready_;
  std::function<T(uint64_t)> make_;
  std::vector<std::thread> threads_;
};

}  // namespace vxqa_sweep
