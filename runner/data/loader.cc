#include "runner/data/loader.h"

#include <algorithm>
#include <atomic>

namespace ringtrain::data {

StatusOr<std::unique_ptr<PrefetchLoader>> PrefetchLoader::Create(const Dataset& dataset,
                                                                 const LoaderOptions& options) {
  if (options.batch_size <= 0) return InvalidArgument("batch size must be positive");
  // One slot is held by the trainer while the next is filled, so at least two are needed.
  if (options.workers <= 0 || options.prefetch < 2) {
    return InvalidArgument("loader needs at least 1 worker and a prefetch depth of at least 2");
  }
  if (dataset.count == 0) return InvalidArgument("the dataset is empty");
  return std::unique_ptr<PrefetchLoader>(new PrefetchLoader(&dataset, nullptr, options));
}

StatusOr<std::unique_ptr<PrefetchLoader>> PrefetchLoader::Create(const Table& table,
                                                                 const LoaderOptions& options) {
  if (options.batch_size <= 0) return InvalidArgument("batch size must be positive");
  if (options.workers <= 0 || options.prefetch < 2) {
    return InvalidArgument("loader needs at least 1 worker and a prefetch depth of at least 2");
  }
  if (table.n == 0) return InvalidArgument(table.path + ": the dataset is empty");
  return std::unique_ptr<PrefetchLoader>(new PrefetchLoader(nullptr, &table, options));
}

namespace {

std::atomic<int> live_loaders{0};
std::atomic<int> peak_live_loaders{0};

// The global sample position a loader starts at (not negative).
std::int64_t StartSamples(const LoaderOptions& o) {
  std::int64_t s = o.start_samples >= 0
                       ? o.start_samples
                       : o.start_step * std::int64_t{o.batch_size} * std::int64_t{o.world_size};
  return std::max<std::int64_t>(0, s);
}

}  // namespace

PrefetchLoader::PrefetchLoader(const Dataset* dataset, const Table* table,
                               const LoaderOptions& options)
    : dataset_(dataset),
      table_(table),
      count_(dataset != nullptr ? dataset->count : table->n),
      sample_(dataset != nullptr ? static_cast<std::size_t>(dataset->sample_size())
                                 : table->features),
      targets_(table != nullptr && !table->task.classification()
                   ? static_cast<std::size_t>(table->task.targets)
                   : 0),
      options_(options),
      sampler_(count_, options.rank, options.world_size, options.seed, options.shuffle),
      steps_per_epoch_(sampler_.steps_per_epoch(options.batch_size)),
      start_epoch_(options.start_epoch),
      start_samples_(StartSamples(options)) {
  // A position at or past the end of the epoch is the start of the next one.
  if (start_samples_ >= static_cast<std::int64_t>(count_)) {
    ++start_epoch_;
    start_samples_ = 0;
  }
  const std::int64_t global_batch = std::int64_t{options.batch_size} * options.world_size;
  first_steps_ =
      sampler_.steps_per_epoch(options.batch_size, static_cast<std::size_t>(start_samples_));
  base_step_ = start_samples_ / global_batch;
  end_seq_ = start_epoch_ < options.end_epoch
                 ? first_steps_ + (options.end_epoch - start_epoch_ - 1) * steps_per_epoch_
                 : 0;
  consumed_ = 0;
  slots_.resize(static_cast<std::size_t>(options.prefetch));
  const SlotSizes sizes = SizesOf(options.batch_size, sample_, targets_);
  for (auto& s : slots_) {
    s.x.resize(sizes.x);
    s.targets.resize(sizes.targets);
    s.y.resize(sizes.y);
    s.idx.reserve(sizes.idx);
  }
  for (int w = 0; w < options.workers; ++w) threads_.emplace_back([this, w] { Work(w); });
  const int live = live_loaders.fetch_add(1) + 1;
  int peak = peak_live_loaders.load();
  while (live > peak && !peak_live_loaders.compare_exchange_weak(peak, live)) {
  }
}

int PrefetchLoader::PeakLive() { return peak_live_loaders.load(); }

void PrefetchLoader::ResetPeakLive() { peak_live_loaders.store(live_loaders.load()); }

PrefetchLoader::SlotSizes PrefetchLoader::SizesOf(int batch_size, std::size_t sample_floats,
                                                  std::size_t target_floats) {
  const auto bs = static_cast<std::size_t>(batch_size);
  SlotSizes s;
  s.x = bs * sample_floats;
  // A regression Table's targets, else the labels.
  s.targets = bs * target_floats;
  s.y = target_floats > 0 ? 0 : bs;
  s.idx = bs;
  return s;
}

std::uint64_t PrefetchLoader::SlotBytes(const LoaderOptions& options, std::size_t sample_floats,
                                        std::size_t target_floats) {
  const SlotSizes s = SizesOf(options.batch_size, sample_floats, target_floats);
  const std::uint64_t slot =
      (s.x + s.targets) * sizeof(float) + s.y * sizeof(std::int32_t) + s.idx * sizeof(std::size_t);
  return slot * static_cast<std::uint64_t>(std::max(options.prefetch, 0));
}

PrefetchLoader::Position PrefetchLoader::Locate(std::int64_t seq) const {
  if (seq < first_steps_) return {start_epoch_, seq, first_steps_, start_samples_};
  const std::int64_t rest = seq - first_steps_;
  return {start_epoch_ + 1 + static_cast<int>(rest / steps_per_epoch_), rest % steps_per_epoch_,
          steps_per_epoch_, 0};
}

PrefetchLoader::~PrefetchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  live_loaders.fetch_sub(1);
}

const std::vector<std::size_t>& PrefetchLoader::EpochIndices(int epoch) {
  int k = epoch % 2;
  if (cached_epoch_[k] != epoch) {
    const auto offset = static_cast<std::size_t>(epoch == start_epoch_ ? start_samples_ : 0);
    sampler_.Indices(epoch, cached_indices_[k], offset);
    cached_epoch_[k] = epoch;
  }
  return cached_indices_[k];
}

void PrefetchLoader::Work(int worker) {
  const auto depth = static_cast<std::int64_t>(slots_.size());
  // Worker w fills batches first_seq + w, + workers, ...; a batch waits for its slot to be freed.
  const std::int64_t global_batch = std::int64_t{options_.batch_size} * options_.world_size;
  const auto dataset_size = static_cast<std::int64_t>(count_);
  for (std::int64_t seq = worker; seq < end_seq_; seq += options_.workers) {
    Slot* slot = &slots_[static_cast<std::size_t>(seq % depth)];
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || seq < consumed_ + depth - 1; });
      if (stop_) return;
      const Position pos = Locate(seq);
      const auto& indices = EpochIndices(pos.epoch);
      std::size_t begin = static_cast<std::size_t>(pos.index) * options_.batch_size;
      std::size_t end = std::min(indices.size(), begin + options_.batch_size);
      slot->idx.assign(indices.begin() + static_cast<std::ptrdiff_t>(begin),
                       indices.begin() + static_cast<std::ptrdiff_t>(end));
      slot->view.epoch = pos.epoch;
      slot->view.step = (pos.epoch == start_epoch_ ? base_step_ : 0) + pos.index;
      slot->view.last_in_epoch = pos.index + 1 == pos.steps;
      slot->view.epoch_samples_after =
          slot->view.last_in_epoch
              ? dataset_size
              : std::min(dataset_size, pos.offset + (pos.index + 1) * global_batch);
    }
    int n = static_cast<int>(slot->idx.size());
    if (dataset_ != nullptr) {
      Gather(*dataset_, slot->idx.data(), n, slot->x.data(), slot->y.data());
    } else {
      Gather(*table_, slot->idx.data(), n, slot->x.data(),
             slot->y.empty() ? nullptr : slot->y.data(),
             slot->targets.empty() ? nullptr : slot->targets.data());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      slot->view.x = slot->x.data();
      slot->view.y = slot->y.empty() ? nullptr : slot->y.data();
      slot->view.targets = slot->targets.empty() ? nullptr : slot->targets.data();
      slot->view.n = n;
      slot->seq = seq;
    }
    cv_.notify_all();
  }
}

StatusOr<BatchView> PrefetchLoader::Next(Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (consumed_ >= end_seq_) return NotFound("no more batches: the last epoch is done");
  const auto depth = static_cast<std::int64_t>(slots_.size());
  Slot& slot = slots_[static_cast<std::size_t>(consumed_ % depth)];
  const std::int64_t want = consumed_;
  if (slot.seq != want) {
    auto start = std::chrono::steady_clock::now();
    bool ready = cv_.wait_for(lock, timeout, [&] { return slot.seq == want; });
    wait_seconds_ += SecondsSince(start);
    if (!ready) {
      return DeadlineExceeded("data loader: batch " + std::to_string(want) + " not ready after " +
                              std::to_string(timeout.count()) + " ms");
    }
  }
  ++consumed_;
  // The slot handed out now is reused only for batch want+depth, which waits for
  // consumed_ > want+1, i.e. until the caller has asked for the batch after this one.
  lock.unlock();
  cv_.notify_all();
  return slot.view;
}

}  // namespace ringtrain::data
