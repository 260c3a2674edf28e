// A persistent tile scheduler for CUTLASS's Hopper FMHA kernels on causal problems: query tiles heaviest first, dealt
// to the blocks in alternating directions, so that every block gets about the same number of key tiles.
#pragma once

#include <cutlass/fast_math.h>
#include <cutlass/kernel_hardware_info.h>
#include <cute/tensor.hpp>

#include <algorithm>

namespace tensoracle::cuda::sm90 {

// The FMHA kernel's persistent scheduler (CUTLASS's PersistentTileScheduler) deals the tiles (query tile, batch, head)
// with the query tile varying fastest and each block taking every grid-th tile. Under a causal mask query tile m has
// m + 1 key tiles' work (128 × 128 tiles), and when the number of query tiles divides the grid (4 tiles of GPT-2's 512
// queries, 132 blocks) a block meets the same query tile every time: the blocks holding the last tile do 4 tiles of
// work per tile taken against 2.5 on average, and the kernel waits for them.
//
// This scheduler numbers the tiles from the heaviest query tile down (tile i is query tile last − i / (batch·heads))
// and deals them in rounds of one tile per block, forwards in even rounds and backwards in odd ones: a block that took
// a heavy tile in one round takes a light one in the next. Each block's roles (the loads and every consumer warpgroup)
// step through the same deterministic sequence, as with CUTLASS's scheduler. Results are those of any other order:
// every tile is computed on its own.
struct CausalBalancedTileScheduler {
  struct Params {
    int num_blocks = 0;  // query tiles × batch × heads
    int grid = 0;        // blocks launched: min(num_blocks, multiprocessors)
    int last_m_block = 0;
    cutlass::FastDivmod divmod_grid;         // a work index into (round, lane)
    cutlass::FastDivmod divmod_batch_heads;  // a tile into (query tile from the last, batch · heads)
    cutlass::FastDivmod divmod_batch;        // batch · heads into (head, batch)
  };

  int work = 0;  // this block's position in the dealing: blockIdx.x, then + grid a round
  Params params;

  CUTLASS_DEVICE explicit CausalBalancedTileScheduler(Params const& p)
      : work(static_cast<int>(blockIdx.x)), params(p) {}

  template <class ProblemSize, class ClusterShape, class TileShape>
  static Params to_underlying_arguments(ProblemSize const& problem_size, cutlass::KernelHardwareInfo hw_info,
                                        ClusterShape const& cluster_shape, TileShape const& tile_shape) {
    int sm_count = hw_info.sm_count;
    if (sm_count <= 0) sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(hw_info.device_id);
    const int batch = cute::size<0>(problem_size), heads = cute::size<1>(problem_size);
    const int m_blocks = cutlass::round_up(cute::ceil_div(cute::size<2>(problem_size), cute::size<0>(tile_shape)),
                                           cute::size<0>(cluster_shape));
    Params p;
    p.num_blocks = m_blocks * batch * heads;
    p.grid = std::max(1, std::min(p.num_blocks, sm_count));
    p.last_m_block = m_blocks - 1;
    p.divmod_grid = cutlass::FastDivmod(p.grid);
    p.divmod_batch_heads = cutlass::FastDivmod(batch * heads);
    p.divmod_batch = cutlass::FastDivmod(batch);
    return p;
  }

  static dim3 get_grid_shape(Params const& p) { return dim3(static_cast<unsigned>(p.grid), 1, 1); }

  // The tile this block takes at its current position: rounds alternate direction. Every round but the last holds
  // grid tiles that all exist, so a block meets a missing tile only in the last round, and then none after it.
  CUTLASS_DEVICE int tile() const {
    int round = 0, lane = 0;
    params.divmod_grid(round, lane, work);
    return (round & 1) != 0 ? round * params.grid + (params.grid - 1 - lane) : work;
  }

  CUTLASS_DEVICE bool is_valid() const { return tile() < params.num_blocks; }

  CUTLASS_DEVICE auto get_block_coord() const {
    int from_last = 0, batch_head = 0, head = 0, batch = 0;
    params.divmod_batch_heads(from_last, batch_head, tile());
    params.divmod_batch(head, batch, batch_head);
    return cute::make_coord(params.last_m_block - from_last, cute::_0{}, cute::make_coord(batch, head));
  }

  CUTLASS_DEVICE CausalBalancedTileScheduler& operator++() {
    work += params.grid;
    return *this;
  }
};

}  // namespace tensoracle::cuda::sm90
