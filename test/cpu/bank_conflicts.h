// The bank-conflict model the layout proofs share (test/cpu/smem_layout.cpp for the SM70
// path, test/cpu/sm80_layouts.cpp for the SM80 path).
#pragma once
#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace vxqa_test {

// Ways of the worst bank conflict of one warp-wide access of `width` bytes per lane.
// Shared memory has 32 banks of 4 bytes; a 16-byte access is served in 4 phases of 8 lanes,
// an 8-byte one in 2 phases of 16, a 4-byte one in 1 phase. Lanes reading the same word are
// served together (broadcast). A lane whose address is kInactive takes no part (predicated off).
constexpr int kInactive = -1;
inline int conflict_ways(const std::vector<int>& address, int width) {
  const int lanes_per_phase = 32 / (width / 4);
  int worst = 1;
  for (int phase = 0; phase < 32 / lanes_per_phase; ++phase) {
    std::map<int, std::set<int>> words_of_bank;
    for (int l = phase * lanes_per_phase; l < (phase + 1) * lanes_per_phase; ++l) {
      if (address[l] == kInactive) continue;
      for (int w = 0; w < width / 4; ++w) {
        const int word = address[l] / 4 + w;
        words_of_bank[word % 32].insert(word);
      }
    }
    for (auto& [bank, words] : words_of_bank) worst = std::max<int>(worst, int(words.size()));
  }
  return worst;
}

}  // namespace vxqa_test
