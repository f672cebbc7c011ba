// The target end of a pipelined job. One-sided RMA tells the target agent nothing as bytes land, so the
// writer reports each segment once its batch finished (POST /v1/grants/{id}/landed, with the CRC32C of
// each slice as it read them); this agent then, per segment and while the next is on the wire: computes
// the CRC32C of what landed and names the slices that differ; writes verified bytes to the grant's save
// file; and, for a ring grant (a file target with no region), frees their place in the ring for bytes
// further on. POST /v1/grants/{id}/commit ends the save (fsync, rename). docs/pipelines.md.
//
// A saving writer keeps two reports in flight, so the disk is not left idle while the next segment's
// report travels and its CRC32C is computed: reports are checked side by side, outside any lock, and
// their bytes still go to the file in order (a report that says the one before it is still out waits
// for it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "conduit/common/result.h"
#include "files/save_file.h"

namespace conduit::agent {

class Landing {
 public:
  // `memory`: the granted range. `stream_bytes`: how many bytes the writer sends in all (the granted
  // length, or for a ring the whole file); ring: range offset X lands at X % memory.size().
  Landing(std::span<std::byte> memory, std::uint64_t stream_bytes, bool ring, std::optional<SaveFile> save,
          std::string writer = "");

  struct Report {
    std::vector<std::uint64_t> mismatched;  // indices of the slices whose CRC32C differs
    bool saved = false;                     // the bytes went to the save file
    WrittenBytes written;                   // how, this time (around the page cache or through it)
  };
  // [offset, +length) of the stream has landed. crc32c: one per `slice` bytes, empty to skip the check.
  // Saving is in order: bytes past what was saved so far are a Conflict, at once, or with
  // `wait_for_previous` once the gap has not closed within kOrderWait or a save before them failed.
  Result<Report> landed(std::uint64_t offset, std::uint64_t length, std::uint64_t slice,
                        const std::vector<std::uint32_t>& crc32c, bool wait_for_previous = false);
  // The writer says every byte of the stream landed: a save's file goes in place (Conflict when some were
  // not saved); without a save, `bytes` is where the write ended in the grant, Conflict unless clean
  // reports reached it (a resumed writer vouches for the prefix it did not report). True the first time,
  // false again after a success (nothing to do): the grant's region gets one new version per committed write.
  Result<bool> commit(std::uint64_t bytes);
  // Who writes through this grant (CreateGrant's writer): the region's updatedBy once committed.
  const std::string& writer() const { return writer_; }

  // [0, this) of the stream was reported landed and found clean (in order, a re-report below it changing
  // nothing): the bytes a Chain hop may forward on. Never counts a ring's bytes (they are overwritten).
  std::uint64_t confirmed() const;
  // Waits at most `wait` for confirmed() to reach `end`; answers confirmed().
  std::uint64_t wait_confirmed(std::uint64_t end, std::chrono::milliseconds wait) const;

  bool ring() const { return ring_; }
  bool saves() const { return save_.has_value(); }
  // Whether a writer has reported landed bytes here yet: a grant that takes reports commits through them
  // (commit()); one never reported to is a plain write grant, whose holder commits on its own word.
  bool reported() const;
  std::uint64_t stream_bytes() const { return stream_bytes_; }
  // {ring, streamBytes, file?, savedBytes, committed}
  nlohmann::json to_json() const;

 private:
  void note_clean(std::uint64_t offset, std::uint64_t end);  // mu_ held

  std::span<std::byte> memory_;
  std::uint64_t stream_bytes_;
  bool ring_;
  // mu_ guards the counters below; write_mu_ the save file (a write, the commit). Never taken in the other
  // order: landed() holds one at a time, commit() takes write_mu_ first.
  mutable std::mutex mu_;
  std::mutex write_mu_;
  mutable std::condition_variable confirmed_cv_;
  std::condition_variable order_cv_;  // saved_end_ moved, or a save failed
  std::optional<SaveFile> save_;
  std::uint64_t saved_end_ = 0;
  std::uint64_t confirmed_ = 0;
  // Clean reports past confirmed_ (two were checked side by side and the later one finished first), by
  // offset: confirmed_ takes them in once it reaches them. At most kMaxAhead kept.
  std::map<std::uint64_t, std::uint64_t> clean_ahead_;
  std::uint64_t failed_saves_ = 0;  // writes to the save file that failed: a report waiting behind gives up
  std::uint64_t reported_end_ = 0;  // the furthest end of a clean report
  bool reported_ = false;           // any report, clean or not, was taken
  bool committed_ = false;
  std::string writer_;
};

}  // namespace conduit::agent
