// A persistent tile scheduler for CUTLASS's Hopper FMHA kernels on causal problems: query tiles heaviest first, dealt
// to the blocks in alternating directions, so that every block gets about the same number of key tiles.
#pragma once

#include <cutlass/fast_math.h>
#include <cutlass/kernel_hardware_info.h>
#include <cute/tensor.hpp>
#include <kernel/fmha_tile_scheduler.hpp>

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
  // CUTLASS's scheduler's parameters (its tile count, query-tile count and batch divisors, its grid: min(tiles,
  // multiprocessors)), so that both cover the same tiles by construction, and the two divisors of this dealing.
  using Base = cutlass::fmha::kernel::PersistentTileScheduler;
  struct Params {
    Base::Params base;
    cutlass::FastDivmod divmod_grid;         // a work index into (round, lane); its divisor is the grid
    cutlass::FastDivmod divmod_batch_heads;  // a tile into (query tile from the last, batch · heads)
  };

  int work = 0;  // this block's position in the dealing: blockIdx.x, then + grid a round
  Params params;

  CUTLASS_DEVICE explicit CausalBalancedTileScheduler(Params const& p)
      : work(static_cast<int>(blockIdx.x)), params(p) {}

  template <class ProblemSize, class ClusterShape, class TileShape>
  static Params to_underlying_arguments(ProblemSize const& problem_size, cutlass::KernelHardwareInfo hw_info,
                                        ClusterShape const& cluster_shape, TileShape const& tile_shape) {
    Params p;
    p.base = Base::to_underlying_arguments(problem_size, hw_info, cluster_shape, tile_shape);
    p.divmod_grid = cutlass::FastDivmod(static_cast<int>(Base::get_grid_shape(p.base).x));
    p.divmod_batch_heads = cutlass::FastDivmod(cute::size<0>(problem_size) * cute::size<1>(problem_size));
    return p;
  }

  static dim3 get_grid_shape(Params const& p) { return Base::get_grid_shape(p.base); }

  // The tile this block takes at its current position: rounds alternate direction. Every round but the last holds
  // grid tiles that all exist, so a block meets a missing tile only in the last round, and then none after it.
  CUTLASS_DEVICE int tile() const {
    int round = 0, lane = 0;
    params.divmod_grid(round, lane, work);
    const int grid = params.divmod_grid.divisor;
    return (round & 1) != 0 ? round * grid + (grid - 1 - lane) : work;
  }

  CUTLASS_DEVICE bool is_valid() const { return tile() < params.base.num_blocks; }

  CUTLASS_DEVICE auto get_block_coord() const {
    int from_last = 0, batch_head = 0, head = 0, batch = 0;
    params.divmod_batch_heads(from_last, batch_head, tile());
    params.base.divmod_b(head, batch, batch_head);
    return cute::make_coord(params.base.divmod_m_block.divisor - 1 - from_last, cute::_0{},
                            cute::make_coord(batch, head));
  }

  CUTLASS_DEVICE CausalBalancedTileScheduler& operator++() {
    work += params.divmod_grid.divisor;
    return *this;
  }
};

}  // namespace tensoracle::cuda::sm90
