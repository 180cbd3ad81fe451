// fullpipe-requires: sm_90a (wgmma, TMA, mbarrier transaction counts)
// Hopper GEMM, rung 4: persistent, clusters of 2 with TMA multicast, TMA-store epilogue.
//
// Technique: rung 3's roles (a TMA producer warpgroup, two wgmma consumer warpgroups,
// full/empty mbarriers, setmaxnreg), plus
//   * persistent blocks: the grid is as many 2-block clusters as fit on the GPU; each
//     cluster walks the cluster tiles t = cluster, cluster + clusters, ... in grouped
//     order (TileScheduler), and the producer runs ahead into the next tile while the
//     consumers finish the current one (the ring and its phases continue across tiles);
//   * a cluster of 2 blocks side by side along M computes a 256 x 256 tile: both need
//     the same B slice, so each block loads half of it (two 64-wide chunks) with
//     multicast::cluster into the same offset of both blocks' shared memory and
//     signals both blocks' full[] barrier: B is read from L2 once per cluster;
//   * the epilogue goes through shared memory: each consumer warpgroup writes its
//     64 x 256 result in 64 x 64 pieces (128-byte swizzled, two buffers) and one thread
//     stores each piece with a TMA store (UTMASTG), which clips at the matrix edges.
//
//   warpgroup 0   PRODUCER  its first warp, one elected lane issuing, per slice: wait
//                 empty[s] (released by all 4 consumer warpgroups of the cluster) -> arm
//                 full[s] with 48 KiB (less at an edge) -> TMA A[128 x 64] (own rows) +
//                 multicast B chunks {2r, 2r+1}
//   warpgroups    CONSUMERS wait full[s] -> wgmma x4 -> commit -> wait <= 1 ->
//   1 and 2       arrive on empty[] of the slice before in *both* blocks (mapa +
//                 remote arrive, fp_mbar::mbar_arrive_cluster): the peer's next multicast
//                 writes into this slot too
//
// Stream-K (sk_tiles > 0, chosen by hopper_gemm.stream_k): where the cluster tiles do
// not fill the last wave (3072^3: 2.2 waves, 0.73 of the SMs' time busy; 512 x 4096 x
// 4096: 32 tiles, half the clusters idle), the last sk_tiles tiles are not dealt out
// whole but as K slices, evenly: sk_tiles x slices cut into one contiguous run per
// cluster (below one wave the host launches tiles x SPLIT clusters, so each tile is cut
// into SPLIT equal runs). A run that starts inside a tile leaves partial sums: its
// block's consumers write them to a workspace (save_partial) and raise a flag; the
// cluster whose run holds the tile's first slice adds them as it stores the tile
// (PartialSums). The runs go to clusters by a ticket taken at start (an atomic
// counter), the earliest slices to the latest tickets, so a cluster only ever waits
// for partial sums of clusters that started before it: they are resident and finish
// their partial before anything else, whatever else shares the GPU.
// The kernel leaves the workspace's counter and flags zero as it found them: the counter
// wraps to 0 as the last cluster takes its ticket (atomicInc), and each flag is raised by
// one warpgroup and lowered by the one that waits for it. A workspace zeroed once then
// serves every later launch on its stream with no memset in between (hopper_gemm keeps
// one per stream).
//
// The slot a multicast fills in the peer must be free there as well, which is why
// empty[s] counts CONSUMERS x CLUSTER arrivals. full[s] may receive the peer's bytes
// before this block's producer armed it: the phase cannot complete before that arrival,
// so the early bytes are simply counted. Both blocks sync as a cluster after the
// barriers are initialized and again before exiting (no block may leave while its peer
// can still write into its shared memory or arrive on its barriers).
//
// Build options (-D, defaults = the design above; hopper_gemm.PersistentBuild names
// them): GROUP_M, MULTICAST, CLUSTER_M x CLUSTER_N (a 2 x 2 cluster also multicasts
// A: each block loads half of its A box for itself and its row peer, and empty[s] then
// counts the consumers of every block that writes into the slot), TILE_ORDER (grouped
// or Hilbert), STMATRIX (epilogue pieces written with stmatrix), TILE_N (fp_hopper's
// tile header; 128: 128 x 128 block tiles, m64n128k16, for products with too few
// 128 x 256 tiles to fill the GPU; 64: 128 x 64 tiles, m64n64k16, for products that even
// 128 x 128 tiles leave half the SMs without; 192: 128 x 192 tiles, m64n192k16, for products
// whose waves 192-wide tiles fill where 256-wide ones leave a quarter or a third empty; in a
// cluster of 2 along M only for B = W^T, each block loading 96 of W's rows), TILE_M (64:
// 64-row tiles, one consumer warpgroup, 256 threads, no register moves; one block a
// cluster, or pairs along M sharing B: the transposed product's 64-row blocks of W in pairs
// sharing x's slice, as cuBLAS runs 64 x 152 tiles at 300 tokens), STAGES (slices in the
// ring) and B_K_MAJOR (B given as W^T for a row-major N x K matrix W, e.g. an nn.Linear
// weight; the tile header).
//
// SWAP_AB (the transposed product, C^T = W X^T): the host passes the weight W (N x K, the
// b = w.T of an nn.Linear) as the kernel's A and the activations X (M x K) as its B, with
// M and N swapped. The tile's TILE_M rows then walk W's rows and its TILE_N columns are the
// product's rows, 80 ... 256 in steps of 16: a product of 200 rows is one tile of 208, where
// 128-row tiles compute 256 (cuBLAS runs the same shape: its column-major M is our N). A
// TILE_N that 64-row chunks do not split over the cluster arrives as CLUSTER_M boxes of
// TILE_N / CLUSTER_M rows of X (B_CHUNK_COLS).
// More rows than TILE_N take ceil(M / TILE_N) tiles along them (300 rows in two of 160,
// where 128 x 256 tiles in clusters of 2 along M compute 512). The epilogue stores the
// result transposed (stmatrix .trans into the piece's buffer, then the TMA store of C's 64
// columns x 64 rows), the tile's last piece ending at the tile's last row
// (epilogue_transposed).
// A_MN_MAJOR (with SWAP_AB): the same for a row-major K x N b (x @ b, the layout of a
// decoder's weights kept as K x N): the kernel's A is b read as its transpose, its slice
// BM / 64 boxes of 64 K-rows by 64 of b's columns, read by wgmma MN-major (imm-trans-a 1).
//
// Edges (load_item<true>): a tile that reaches past M, or past N, has its boxes cut at the
// edge: a TMA box that hangs past the last row of its matrix is slow (EdgeMaps below).
//
// Kernels gemm_hopper_persistent_{bf16,f16}(map_a, map_b, map_c, a_edges, b_edges, M, N, K,
// sk_tiles, workspace): grid = CLUSTER x clusters, cluster (CLUSTER_M * CLUSTER_N, 1, 1) (a cluster
// of one block is launched without the cluster attribute: the implicit cluster of one), 384
// threads (256 at TILE_M 64), dynamic shared memory STAGES * SLICE_BYTES (48 KiB; 32 at
// TILE_N 128, 24 at 64; 8 KiB less at TILE_M 64) + 16 KiB per consumer warpgroup + 1 KiB.
// workspace (sk_tiles > 0 only): a ticket counter and MAX_FLAGS flags, one per consumer
// warpgroup (zero before the first launch; each launch leaves them zero), then 64 x BN fp32
// partial sums per consumer warpgroup (Workspace). Launched as a dependent launch
// (programmatic stream serialization): it waits for the kernel before it in
// fp_pdl::wait_for_prior_grid (dependent_launch.cuh).
#include <fullpipe/dependent_launch.cuh>
#include <fullpipe/gemm_hopper_tile.cuh>
#include <fullpipe/mbarrier.cuh>
#include <fullpipe/tma.cuh>

#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8   // cluster-tile rows walked together by the grouped order
#endif
// MULTICAST=0 builds the comparison point: the same cluster launch, but every block
// loads all of its A and B itself (no multicast, empty[] local), so ncu and the timings
// show what multicast saves.
#ifndef MULTICAST
#define MULTICAST 1
#endif
// The cluster: CLUSTER_M blocks along M share (multicast) B, CLUSTER_N blocks along N
// share A. 2 x 1 is the design above; 2 x 2 multicasts both operands (each block loads
// half of its A box and half of its B slice), 4 x 1 quarters B.
#ifndef CLUSTER_M
#define CLUSTER_M 2
#endif
#ifndef CLUSTER_N
#define CLUSTER_N 1
#endif
// TILE_ORDER 0: grouped (GROUP_M cluster-tile rows at a time); 1: Hilbert curve over the
// cluster-tile grid (falls back to grouped when the grid is more than 2:1 off square).
#ifndef TILE_ORDER
#define TILE_ORDER 0
#endif
// STMATRIX 1: the epilogue writes its shared-memory pieces with stmatrix (16 per thread
// and tile) instead of 32-bit stores (64).
#ifndef STMATRIX
#define STMATRIX 0
#endif
#ifndef SWAP_AB
#define SWAP_AB 0
#endif

namespace {

using namespace fp_hopper;
using fp_tma::TensorMap;

constexpr int CLUSTER = CLUSTER_M * CLUSTER_N;
static_assert(CLUSTER_M == 1 || CLUSTER_M == 2 || CLUSTER_M == 4, "CLUSTER_M splits B's chunks: 1, 2 or 4");
// B's slice arrives in chunks of B_CHUNK_COLS columns (64, or TILE_N / CLUSTER_M rows of W
// where 64-wide chunks do not split evenly over the cluster: the transposed product's widths,
// and 192 in pairs), each one TMA box; a block of a cluster sharing B loads a whole number of them.
constexpr int B_CHUNK_COLS = BN % CHUNK_N == 0 && BN / CHUNK_N % CLUSTER_M == 0 ? CHUNK_N : BN / CLUSTER_M;
constexpr int B_CHUNK_LOAD_BYTES = B_CHUNK_COLS * BK * ELEM;
static_assert(B_CHUNK_COLS == CHUNK_N || (B_K_MAJOR && B_CHUNK_COLS % 8 == 0 && BN % CLUSTER_M == 0),
              "a chunk of W's rows holds whole 1 KiB swizzle atoms");
static_assert(BN / B_CHUNK_COLS % CLUSTER_M == 0, "each block of a cluster loads a whole number of B chunks");
static_assert(!SWAP_AB || (B_K_MAJOR && STMATRIX == 0), "the transposed product: both operands K-major");
static_assert(SWAP_AB || BN % CHUNK_N == 0, "C's pieces are 64 columns: a TILE_N of 80 ... 240 is for SWAP_AB");
static_assert(CLUSTER_N == 1 || CLUSTER_N == 2, "CLUSTER_N splits A's 128 rows: 1 or 2");
static_assert(!A_MN_MAJOR || (SWAP_AB && CLUSTER_N == 1), "a row-major b's transposed product shares no A");
static_assert(CLUSTER >= 1 && CLUSTER <= 8, "a portable cluster has at most 8 blocks");
constexpr int THREADS = (1 + CONSUMERS) * 128;
// setmaxnreg: the producer's warpgroup keeps 40 registers a thread, the consumers take the rest
// (40 x 128 + 232 x 256 = the 168 x 384 of the launch). The Hilbert walk and a 2 x 2
// cluster's ranks do not fit a stream-K producer in 40: 56 and 224 there.
constexpr bool BIG_PRODUCER = TILE_ORDER == 1 || CLUSTER_N > 1;
constexpr int PRODUCER_REGS = BIG_PRODUCER ? 56 : 40;
constexpr int CONSUMER_REGS = BIG_PRODUCER ? 224 : 232;
static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 168 * THREADS, "more registers than launched");
// One consumer warpgroup (TILE_M 64) holds 64 x BN accumulators, at most 128 a thread, and
// 256 threads launch with registers to spare: nothing to move.
constexpr bool MOVE_REGISTERS = CONSUMERS > 1;
static_assert(CONSUMERS > 1 || (CLUSTER_M <= 2 && CLUSTER_N == 1), "64-row tiles: one block a cluster, or pairs along M");
constexpr int OUT_N = 64;                             // columns per TMA store (128 bytes)
constexpr int OUT_BYTES = WG_M * OUT_N * ELEM;        // 8 KiB
// What one block loads per slice: its share of B (chunks) and of A (rows); the tensor
// map of A has boxes of A_ROWS rows (hopper_gemm.py plans them).
constexpr bool SHARE_B = MULTICAST && CLUSTER_M > 1;
constexpr bool SHARE_A = MULTICAST && CLUSTER_N > 1;
constexpr int B_CHUNKS_PER_BLOCK = SHARE_B ? BN / B_CHUNK_COLS / CLUSTER_M : BN / B_CHUNK_COLS;
constexpr int A_ROWS = SHARE_A ? BM / CLUSTER_N : BM;
// Blocks that write into this block's ring (own, B peers, A peers): each one's
// consumers release a slot here, and this block's consumers release it in each of them.
constexpr int WRITERS = (SHARE_B ? CLUSTER_M : 1) + (SHARE_A ? CLUSTER_N : 1) - 1;

// Edges. A box that hangs past the last row of its matrix (A's rows past M, W's past N)
// costs more than one that ends inside it, and far more after a dependent launch: on an
// H200 (session 40, p272-p273), 258 x 3456 x 5216 with 128 x 128 tiles, whose last tile
// row's A boxes hold 2 rows and 126 past M, ran 52 us, and 32.5 us with A's map over a
// 384-row allocation (37.5 against 32.8 without dependent launch); 32 rows past cost 5 %,
// one row nothing. So where a box would hang EDGE_HANG rows or more past the edge, a tile
// loads the smallest of the boxes of 64, 32, 16 and 8 rows (EdgeMaps) that holds the rows
// inside the matrix (one box: each load more in the producer's loop costs, p277), and no
// B chunk that lies wholly past N. The slot's other rows keep what an earlier slice left
// there (or the SM's last kernel): they reach only rows and columns of C past M and N,
// which the TMA store clips, and stream-K's partial sums carry them only to the same
// places of the same tile. B's K-rows are never cut: the sum over K meets them with A's
// columns past K, zeros, and 0 x a stale Inf or NaN would not be zero.
constexpr int EDGE_HANG = 16;   // a box hanging fewer rows past the edge is loaded whole
using fp_tma::EDGE_BOXES;
using fp_tma::EdgeMaps;         // the same matrix in boxes of 64 >> i rows
// a B chunk's box: 64 K-rows of B, or B_CHUNK_COLS rows of W (B_K_MAJOR)
constexpr int B_BOX_ROWS = B_K_MAJOR ? B_CHUNK_COLS : BK;
static_assert(B_K_MAJOR || (B_BOX_ROWS == BK && B_CHUNK_COLS == CHUNK_N), "a chunk of a row-major B is 64 x 64");
constexpr int A_PARTS = SHARE_A ? CLUSTER_N : 1;   // A boxes that land in a block's slot per slice
constexpr int A_CHUNKS = BM / WG_M;               // A_MN_MAJOR: A's chunks of 64 of b's columns per slice
constexpr int B_CHUNKS = BN / B_CHUNK_COLS;       // B chunks that land in a block's slot per slice

// The box a tile loads in place of a `box_rows`-row box (`whole`) that holds `inside` rows
// of its matrix: `whole` itself where it hangs past the end by fewer than EDGE_HANG rows, or
// where no smaller EdgeMaps box holds them (33-48 rows of 64, 65-112 of 128); else the
// smallest EdgeMaps box that holds them; nullptr if none is inside. `rows`: its rows.
__device__ __forceinline__ const TensorMap* edge_box(const TensorMap* whole, const EdgeMaps* edges, int box_rows,
                                                     int inside, int& rows) {
    rows = box_rows;
    if (inside > box_rows - EDGE_HANG) return whole;
    if (inside <= 0) {
        rows = 0;
        return nullptr;
    }
    const TensorMap* box = whole;
#pragma unroll
    for (int i = 0; i < EDGE_BOXES; ++i) {
        const int n = 64 >> i;
        if (n < box_rows && n >= inside) {
            box = &edges->box[i];
            rows = n;
        }
    }
    return box;
}

// A box at (col, row0) into dst (MULTICAST_BOX: into the same offset of every block in mask).
template <bool MULTICAST_BOX>
__device__ __forceinline__ void load_box(unsigned char* dst, const TensorMap* map, unsigned long long* full, int col,
                                         int row0, unsigned short mask) {
    if constexpr (MULTICAST_BOX) fp_tma::load_2d_multicast(dst, map, full, col, row0, mask);
    else fp_tma::load_2d(dst, map, full, col, row0);
}

struct alignas(1024) OutBuffer {
    unsigned char bytes[OUT_BYTES];                   // 64 rows x 128 bytes, swizzled
};

struct SharedStorage {
    Slice ring[STAGES];
    OutBuffer out[CONSUMERS][2];                      // double-buffered epilogue pieces
    unsigned long long full[STAGES];                  // slice landed (all its A and B parts)
    unsigned long long empty[STAGES];                 // slot free in every block writing it
    unsigned ticket;                                  // this cluster's place in the stream-K order
};

// The stream-K workspace in global memory: [ticket counter | flags | partial sums], the
// flags and sums one per (cluster ticket, block rank, consumer warpgroup). A partial is
// a warpgroup's ACC accumulators per thread as ACC / 4 float4, thread-minor (coalesced,
// and read back by the thread of the same place in the finishing warpgroup). The flags
// take MAX_FLAGS places whatever the launch (host-checked: blocks x CONSUMERS at most), so
// launches of other builds and grids on the same workspace find them where they left them
// (zero), never under another launch's partial sums (hopper_gemm.WORKSPACE_FLAGS).
struct Workspace {
    unsigned char* base;
    static constexpr int HEADER = 256;
    static constexpr int MAX_FLAGS = 4096;
    __device__ unsigned* counter() const { return reinterpret_cast<unsigned*>(base); }
    __device__ int slot(int ticket, int rank, int wg) const { return (ticket * CLUSTER + rank) * CONSUMERS + wg; }
    __device__ unsigned* flag(int s) const { return reinterpret_cast<unsigned*>(base + HEADER) + s; }
    __device__ float4* partial(int s) const {
        return reinterpret_cast<float4*>(base + HEADER + MAX_FLAGS * 4) + static_cast<long long>(s) * (ACC / 4) * 128;
    }
};

// One piece of a cluster's work: K slices [k_begin, k_end) of a cluster tile, at this
// block's origin (m0, n0). A whole tile has k_begin 0 and k_end = slices.
struct WorkItem {
    int m0, n0;
    int k_begin, k_end;
    int sk_tile;   // the tile's place among the stream-K tiles (-1: a whole, data-parallel tile)
};

// Cluster tiles ((CLUSTER_M * BM) x (CLUSTER_N * BN)) in grouped or Hilbert order.
// The first tiles - sk_tiles go whole: cluster u takes tiles u, u + clusters, ... (a
// whole number of waves, host-checked); the last sk_tiles as runs of K slices, cluster
// u the run [begin(u), end(u)) of their sk_tiles x slices. Every block of a cluster
// walks the same items, so their rings stay in step.
struct TileScheduler {
    int rows, cols, slices;
    int unit;                     // this cluster's place (its ticket when sk_tiles > 0)
    int dp_tiles, next_dp;
    int pos, end;                 // this cluster's stream-K run (host-checked: its slices x clusters < 2^31)
    int rm, rn;                   // this block's place in the cluster
    int side, cell, seen;         // Hilbert walk (side 0: grouped order): next cell, tiles passed

    __device__ TileScheduler(int M, int N, int slices_, int sk_tiles, int unit_) {
        rows = (M + CLUSTER_M * BM - 1) / (CLUSTER_M * BM);
        cols = (N + CLUSTER_N * BN - 1) / (CLUSTER_N * BN);
        slices = slices_;
        unit = unit_;
        dp_tiles = rows * cols - sk_tiles;
        next_dp = unit;
        pos = begin(unit);
        end = begin(unit - 1);
        const int rank = static_cast<int>(fp_tma::cluster_rank());
        rm = rank % CLUSTER_M;
        rn = rank / CLUSTER_M;
        side = 1;
        while (side < rows || side < cols) side *= 2;
        if (TILE_ORDER != 1 || 1ll * side * side > 4ll * rows * cols) side = 0;   // <= 3 skipped cells per tile
        cell = 0;
        seen = 0;
    }
    // Where cluster u's run of stream-K slices begins (u = -1: where they all end). The
    // earliest slices go to the latest tickets: u's run ends where u - 1's begins.
    __device__ __forceinline__ int begin(int u) const {
        return (rows * cols - dp_tiles) * slices * (clusters() - 1 - u) / clusters();
    }
    __device__ __forceinline__ static int clusters() { return gridDim.x / CLUSTER; }
    // The k-th tile that lies inside the grid along the curve (k only grows).
    __device__ __forceinline__ TileCoord walk(int k) {
        for (;;) {
            const TileCoord c = hilbert_tile(cell++, side);
            if (c.m < rows && c.n < cols && seen++ == k) return c;
        }
    }
    __device__ __forceinline__ void place(WorkItem& w, int tile) {
        const TileCoord c = side ? walk(tile) : grouped_tile(tile, rows, cols, GROUP_M);
        w.m0 = (c.m * CLUSTER_M + rm) * BM;
        w.n0 = (c.n * CLUSTER_N + rn) * BN;
    }
    // This cluster's next item; false when it has no more.
    __device__ __forceinline__ bool next(WorkItem& w) {
        if (next_dp < dp_tiles) {
            place(w, next_dp);
            w.k_begin = 0;
            w.k_end = slices;
            w.sk_tile = -1;
            next_dp += clusters();
            return true;
        }
        if (pos >= end) return false;
        const int t = pos / slices;
        w.k_begin = pos % slices;
        w.k_end = min(slices, w.k_begin + (end - pos));
        w.sk_tile = t;
        place(w, dp_tiles + t);
        pos += w.k_end - w.k_begin;
        return true;
    }
};

__device__ __forceinline__ unsigned short b_peers(int rn) {   // same columns: share B
    return static_cast<unsigned short>(((1u << CLUSTER_M) - 1) << (CLUSTER_M * rn));
}
__device__ __forceinline__ unsigned short a_peers(int rm) {   // same rows: share A
    unsigned mask = 0;
#pragma unroll
    for (int j = 0; j < CLUSTER_N; ++j) mask |= 1u << (rm + CLUSTER_M * j);
    return static_cast<unsigned short>(mask);
}

// What a tile at an edge loads per slice: this block's A box (edge_box; nullptr: none); of
// B's chunks, in order, the first `b_whole` whole, then chunk b_whole in `b_box` (an EdgeMaps
// box of W's rows past N; nullptr: none), the rest none (past N); `bytes`: all that lands in
// the slot, the A parts and B chunks a peer multicasts included. A_MN_MAJOR: A's first
// `a_chunks` chunks, whole (a chunk wholly past b's last column is not loaded; one that
// hangs past it is, TMA filling the columns past it with zeros).
struct EdgeCut {
    const TensorMap* a_box;
    const TensorMap* b_box;
    int b_whole, bytes, a_chunks;
};
__device__ __forceinline__ EdgeCut edge_cut(const TensorMap* map_a, const TensorMap* map_b, const EdgeMaps* a_edges,
                                            const EdgeMaps* b_edges, const WorkItem& w, int rn, int M, int N) {
    EdgeCut e{nullptr, nullptr, 0, 0, 0};
    int rows;
    if constexpr (A_MN_MAJOR) {
#pragma unroll
        for (int c = 0; c < A_CHUNKS; ++c) e.a_chunks += w.m0 + c * WG_M < M;
        e.a_box = e.a_chunks ? map_a : nullptr;
        e.bytes += e.a_chunks * A_CHUNK_BYTES;
    } else {
#pragma unroll
        for (int j = 0; j < A_PARTS; ++j) {
            const TensorMap* box = edge_box(map_a, a_edges, A_ROWS, M - (w.m0 + j * A_ROWS), rows);
            if (j == (SHARE_A ? rn : 0)) e.a_box = box;
            e.bytes += rows * 128;
        }
    }
#pragma unroll
    for (int c = 0; c < B_CHUNKS; ++c) {
        const int inside = N - (w.n0 + c * B_CHUNK_COLS);
        const TensorMap* box;
        if constexpr (B_K_MAJOR) {
            box = edge_box(map_b, b_edges, B_BOX_ROWS, inside, rows);
        } else {   // a chunk of B's columns: whole or none
            box = inside > 0 ? map_b : nullptr;
            rows = inside > 0 ? B_BOX_ROWS : 0;
        }
        e.b_whole += box == map_b;
        if (box && box != map_b) e.b_box = box;
        e.bytes += rows * 128;
    }
    return e;
}

// The producer's loads for one work item, from slice `it` on (advanced). EDGE: the tile
// loads the boxes of edge_cut; else all whole. The producer's loop is on the SM's critical
// path, each instruction in it counts (a shared loop with the cuts in it ran 384 x 3456 x
// 5216 in 1.35x the time, p275): the loop without edges has none of their tests.
template <bool EDGE>
__device__ __forceinline__ void load_item(SharedStorage& smem, const TensorMap* map_a, const TensorMap* map_b,
                                          const WorkItem& w, const TileScheduler& sched, const EdgeCut& cut, int& it) {
    const unsigned short mask_a = a_peers(sched.rm), mask_b = b_peers(sched.rn);
    const int m0 = w.m0 + (SHARE_A ? sched.rn * A_ROWS : 0);   // this block's rows of the (shared) A box
    const int a_offset = SHARE_A ? sched.rn * A_ROWS * 128 : 0;
    const int bytes = EDGE ? cut.bytes : SLICE_BYTES;
#pragma unroll 1
    for (int kt = w.k_begin; kt < w.k_end; ++kt, ++it) {
        const int slot = it % STAGES;
        fp_mbar::mbar_wait(&smem.empty[slot], ((it / STAGES) & 1) ^ 1);
        if (!fp_tma::elect_one()) continue;   // (the warp runs the loop, one lane issues: tma.cuh)
        Slice& s = smem.ring[slot];
        unsigned long long* full = &smem.full[slot];
        fp_mbar::mbar_arrive_expect_tx(full, bytes);
        if constexpr (A_MN_MAJOR) {   // (b's columns m0 ... in 64-wide chunks at K-row kt * BK)
#pragma unroll
            for (int c = 0; c < A_CHUNKS; ++c)
                if (!EDGE || c < cut.a_chunks)
                    load_box<false>(s.a + c * A_CHUNK_BYTES, map_a, full, m0 + c * WG_M, kt * BK, 0);
        } else if (!EDGE || cut.a_box) {
            load_box<SHARE_A>(s.a + a_offset, EDGE ? cut.a_box : map_a, full, kt * BK, m0, mask_a);
        }
#pragma unroll
        for (int i = 0; i < B_CHUNKS_PER_BLOCK; ++i) {
            const int c = SHARE_B ? sched.rm * B_CHUNKS_PER_BLOCK + i : i;
            const BoxAt at = b_chunk_at(w.n0 + c * B_CHUNK_COLS, kt * BK);
            const TensorMap* box = !EDGE || c < cut.b_whole ? map_b : c == cut.b_whole ? cut.b_box : nullptr;
            if (box) load_box<SHARE_B>(s.b + c * B_CHUNK_LOAD_BYTES, box, full, at.x, at.y, mask_b);
        }
    }
}

__device__ __forceinline__ void producer(SharedStorage& smem, const TensorMap* map_a, const TensorMap* map_b,
                                         const EdgeMaps* a_edges, const EdgeMaps* b_edges, TileScheduler sched,
                                         int M, int N) {
    int it = 0;   // slices issued by this block, over all its items
    WorkItem w;
    while (sched.next(w)) {
        const EdgeCut cut = edge_cut(map_a, map_b, a_edges, b_edges, w, sched.rn, M, N);
        if (cut.bytes == SLICE_BYTES) load_item<false>(smem, map_a, map_b, w, sched, cut, it);
        else load_item<true>(smem, map_a, map_b, w, sched, cut, it);
    }
}

// empty[slot] of every block that writes into this block's ring (itself, its B peers,
// its A peers): this warpgroup is done reading the slot.
__device__ __forceinline__ void release(SharedStorage& smem, int slot, int rm, int rn) {
    if constexpr (WRITERS == 1) {
        fp_mbar::mbar_arrive(&smem.empty[slot]);
    } else {
        if constexpr (SHARE_B) {
#pragma unroll
            for (int i = 0; i < CLUSTER_M; ++i) fp_mbar::mbar_arrive_cluster(&smem.empty[slot], CLUSTER_M * rn + i);
        } else {
            fp_mbar::mbar_arrive(&smem.empty[slot]);
        }
        if constexpr (SHARE_A) {
#pragma unroll
            for (int j = 0; j < CLUSTER_N; ++j)
                if (j != rn) fp_mbar::mbar_arrive_cluster(&smem.empty[slot], rm + CLUSTER_M * j);
        }
    }
}

// Whether this thread's warp holds rows of C: a warp's accumulators are 16 rows from
// row0 + 16 warp. (A few requests' product, M = 8, leaves 3 of 4 warps on rows past the
// end: their partial sums are never written nor read.)
__device__ __forceinline__ bool warp_has_rows(int row0, int M) {
    return row0 + 16 * (static_cast<int>(threadIdx.x % 128) / 32) < M;
}

// Stream-K: this warpgroup's partial sums of a tile it did not start, for the cluster
// that did (then the flag, released after every thread's stores).
__device__ __forceinline__ void save_partial(const Workspace& ws, int slot, const float (&acc)[ACC], int wg,
                                             bool has_rows) {
    const int t = threadIdx.x % 128;
    float4* dst = ws.partial(slot) + t;
    if (has_rows) {
#pragma unroll
        for (int i = 0; i < ACC / 4; ++i)
            __stcg(dst + i * 128, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
    }
    fp_tma::named_barrier_sync(1 + wg, 128);
    if (t == 0) {
        __threadfence();
        asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(ws.flag(slot)), "r"(1u) : "memory");
    }
}

// Stream-K: the partial sums a tile's finishing warpgroup adds to its own as it stores
// the tile, left by the clusters with the tickets before this one whose runs lie in the
// tile (each run ends where the previous ticket's begins). Added as the epilogue packs
// each place, not into the accumulators first: that needs fewer registers (added first,
// the Hilbert and 2 x 2 builds spill).
struct PartialSums {
    const float4* last;   // the slot of the ticket before this one (this thread's float4 0)
    int count;            // slots last, last - STRIDE, ...
    // float4 from one ticket's slot to the one before's
    static constexpr int STRIDE = CLUSTER * CONSUMERS * (ACC / 4) * 128;

    // The places of an epilogue piece, the 8 column groups from `group` on (accumulators
    // 4 group .. 4 group + 31, as 8 float4), plus the partial sums of the same places, in
    // ticket order. AT_ONCE partials are loaded together, 8 x AT_ONCE loads in flight:
    // loaded a place at a time, each load waited a whole trip to L2 (~16 us a partial, more
    // than a run of 16 slices takes), and a tile cut into 8 runs adds 7 partials per piece.
    static constexpr int AT_ONCE = ACC == 128 ? 2 : 4;
    __device__ __forceinline__ void piece(const float (&acc)[ACC], int group, float4 (&v)[8]) const {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int j = group + i;
            v[i] = make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
        }
#pragma unroll 1
        for (int c0 = 0; c0 < count; c0 += AT_ONCE) {
            float4 p[AT_ONCE][8];
#pragma unroll
            for (int g = 0; g < AT_ONCE; ++g) {
                const float4* src = last - (c0 + g) * STRIDE + group * 128;
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    p[g][i] = c0 + g < count ? __ldcg(src + i * 128) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int g = 0; g < AT_ONCE; ++g)
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    v[i].x += p[g][i].x;
                    v[i].y += p[g][i].y;
                    v[i].z += p[g][i].z;
                    v[i].w += p[g][i].w;
                }
        }
    }
};

// Wait until the partial sums of this tile's later slices are all written (their flags),
// lowering each flag once seen (its sums stay until the next launch, which starts after
// this one has ended); a warp without rows of C adds none (none were written).
__device__ __forceinline__ PartialSums wait_partials(const Workspace& ws, const TileScheduler& sched,
                                                     const WorkItem& w, int wg, bool has_rows) {
    const int tile_end = (w.sk_tile + 1) * sched.slices;
    const int rank = sched.rm + CLUSTER_M * sched.rn;
    int count = 0;
    for (int u = sched.unit - 1; u >= 0 && sched.begin(u) < tile_end; --u, ++count) {
        if (threadIdx.x % 128 == 0) {
            unsigned ready;
            unsigned* flag = ws.flag(ws.slot(u, rank, wg));
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(ready) : "l"(flag) : "memory");
            } while (!ready);
            asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(0u) : "memory");
        }
    }
    fp_tma::named_barrier_sync(1 + wg, 128);   // (the acquire above, for every thread of the warpgroup)
    return {ws.partial(ws.slot(sched.unit - 1, rank, wg)) + threadIdx.x % 128, has_rows ? count : 0};
}

// The warpgroup's 64 x BN result: BN / 64 pieces of 64 x 64 through shared memory, each
// stored by one TMA store; a buffer is rewritten only once its previous store read it.
// ``stored``: the pieces this warpgroup stored so far, over all its tiles (the buffers
// alternate across tiles too: at TILE_N 64 a tile is one piece).
template <bool BF16>
__device__ __forceinline__ void epilogue(SharedStorage& smem, const TensorMap* map_c, const float (&acc)[ACC],
                                         const PartialSums& partials, int wg, int row0, int n0, unsigned& stored) {
    const int t = threadIdx.x % 128;
    const int warp = t / 32, lane = t % 32;
    const bool leader = t == 0;
    const unsigned barrier_id = 1 + wg;   // named barrier of this warpgroup
#pragma unroll
    for (int piece = 0; piece < BN / OUT_N; ++piece, ++stored) {
        unsigned char* buf = smem.out[wg][stored & 1].bytes;
        float4 v[8];   // this piece's 64 x 64 values: 8 places per thread
        partials.piece(acc, piece * (OUT_N / 8), v);
        if (leader) fp_tma::store_wait_read<1>();
        fp_tma::named_barrier_sync(barrier_id, 128);
        if constexpr (STMATRIX) {
            // Matrices (j, h = 0), (j, h = 1), (j + 1, h = 0), (j + 1, h = 1): lane l
            // addresses row l % 8 of matrix l / 8.
            const int r = warp * 16 + 8 * ((lane / 8) & 1) + lane % 8;
#pragma unroll
            for (int j8 = 0; j8 < OUT_N / 8; j8 += 2) {
                const float4 v0 = v[j8], v1 = v[j8 + 1];
                store_matrix_x4(buf + swizzled_offset(r, j8 + lane / 16), pack2<BF16>(v0.x, v0.y),
                                pack2<BF16>(v0.z, v0.w), pack2<BF16>(v1.x, v1.y), pack2<BF16>(v1.z, v1.w));
            }
        } else {
#pragma unroll
            for (int j8 = 0; j8 < OUT_N / 8; ++j8) {
                const int r = warp * 16 + lane / 4;
                *reinterpret_cast<unsigned*>(buf + swizzled_offset(r, j8) + (lane % 4) * 4) =
                    pack2<BF16>(v[j8].x, v[j8].y);
                *reinterpret_cast<unsigned*>(buf + swizzled_offset(r + 8, j8) + (lane % 4) * 4) =
                    pack2<BF16>(v[j8].z, v[j8].w);
            }
        }
        fp_mbar::fence_proxy_async_shared();
        fp_tma::named_barrier_sync(barrier_id, 128);
        if (leader) {
            fp_tma::store_2d(map_c, buf, n0 + piece * OUT_N, row0);
            fp_tma::store_commit();
        }
    }
}

// SWAP_AB: the warpgroup's 64 x BN result is C^T's, 64 of C's columns (W's rows from
// row0) by BN of its rows (from n0): ceil(BN / 64) pieces of 64 rows x 64 columns of C,
// each 8 x 8 block of the accumulators stored transposed (stmatrix .trans) into the
// piece's buffer, as C lies, then one TMA store; rows past M are clipped. Where BN is not
// a multiple of 64 the last piece holds the tile's last 64 rows, from BN - 64: it stores
// again rows the piece before stored (the same values), and none of the next tile's.
template <bool BF16>
__device__ __forceinline__ void epilogue_transposed(SharedStorage& smem, const TensorMap* map_c, const float (&acc)[ACC],
                                                    const PartialSums& partials, int wg, int row0, int n0,
                                                    unsigned& stored) {
    const int t = threadIdx.x % 128;
    const int warp = t / 32, lane = t % 32;
    const bool leader = t == 0;
    const unsigned barrier_id = 1 + wg;
    // Lane l addresses row l % 8 of matrix l / 8 of each x4: matrices (h = 0, j), (h = 1, j),
    // (h = 0, j + 1), (h = 1, j + 1), h the accumulators' upper 8 rows (W's), j their 8
    // columns (C's rows). Transposed, a matrix row is one of C's rows, 8 of its columns:
    // the 16-byte chunk 2 warp + h of the buffer's 128-byte row.
    const int chunk = 2 * warp + ((lane / 8) & 1);
    constexpr int PIECES = (BN + OUT_N - 1) / OUT_N;
    static_assert(BN >= OUT_N && BN % 8 == 0, "a piece is 64 of the tile's rows, in 8-row blocks");
#pragma unroll
    for (int piece = 0; piece < PIECES; ++piece, ++stored) {
        const int first = piece == PIECES - 1 ? BN - OUT_N : piece * OUT_N;   // (the piece's first row of the tile)
        unsigned char* buf = smem.out[wg][stored & 1].bytes;
        float4 v[8];   // this piece's values: 8 places per thread
        partials.piece(acc, first / 8, v);
        if (leader) fp_tma::store_wait_read<1>();
        fp_tma::named_barrier_sync(barrier_id, 128);
#pragma unroll
        for (int j8 = 0; j8 < OUT_N / 8; j8 += 2) {
            const int row = 8 * (j8 + lane / 16) + lane % 8;
            const float4 v0 = v[j8], v1 = v[j8 + 1];
            store_matrix_x4_trans(buf + swizzled_offset(row, chunk), pack2<BF16>(v0.x, v0.y), pack2<BF16>(v0.z, v0.w),
                                  pack2<BF16>(v1.x, v1.y), pack2<BF16>(v1.z, v1.w));
        }
        fp_mbar::fence_proxy_async_shared();
        fp_tma::named_barrier_sync(barrier_id, 128);
        if (leader) {
            fp_tma::store_2d(map_c, buf, row0, n0 + first);
            fp_tma::store_commit();
        }
    }
}

template <bool BF16>
__device__ __forceinline__ void consumer(SharedStorage& smem, const TensorMap* map_c, TileScheduler sched,
                                         const Workspace ws, int wg, int M) {
    const bool signals = threadIdx.x % 128 == 0;
    float acc[ACC];
    int it = 0;   // slices consumed, over all items
    unsigned stored = 0;   // epilogue pieces stored, over all items
    WorkItem w;
    while (sched.next(w)) {
        // (counted from 0, not from k_begin: that form makes ptxas serialize the wgmmas, C7515)
        const int n_slices = w.k_end - w.k_begin;
        const int row0 = w.m0 + wg * WG_M;
        if (row0 >= M) {
            // Every row of this warpgroup lies past the end (M <= 64, or a cluster's last
            // block): it multiplies nothing and stores nothing, but still frees each slot
            // once it has landed, as the ring's phases need.
            for (int kt = 0; kt < n_slices; ++kt, ++it) {
                fp_mbar::mbar_wait(&smem.full[it % STAGES], (it / STAGES) & 1);
                if (signals) release(smem, it % STAGES, sched.rm, sched.rn);
            }
            continue;
        }
        zero(acc);
        for (int kt = 0; kt < n_slices; ++kt, ++it) {
            const int slot = it % STAGES;
            fp_mbar::mbar_wait(&smem.full[slot], (it / STAGES) & 1);
            fp_wgmma::fence();
            mma_slice<BF16>(acc, smem.ring[slot], wg);
            fp_wgmma::commit();
            fp_wgmma::wait<1>();
            fp_wgmma::fence_accumulators(acc);
            if (signals && kt > 0) release(smem, (it - 1) % STAGES, sched.rm, sched.rn);
        }
        fp_wgmma::wait<0>();
        fp_wgmma::fence_accumulators(acc);
        if (signals) release(smem, (it - 1) % STAGES, sched.rm, sched.rn);
        const bool has_rows = warp_has_rows(row0, M);
        if (w.k_begin > 0) {   // a stream-K run that starts inside this tile: its sums go to the tile's first cluster
            save_partial(ws, ws.slot(sched.unit, sched.rm + CLUSTER_M * sched.rn, wg), acc, wg, has_rows);
            continue;
        }
        const PartialSums partials =
            w.k_end < sched.slices ? wait_partials(ws, sched, w, wg, has_rows) : PartialSums{nullptr, 0};
        if constexpr (SWAP_AB) epilogue_transposed<BF16>(smem, map_c, acc, partials, wg, row0, w.n0, stored);
        else epilogue<BF16>(smem, map_c, acc, partials, wg, row0, w.n0, stored);
    }
    if (threadIdx.x % 128 == 0) fp_tma::store_wait<0>();
}

template <bool BF16>
__device__ __forceinline__ void gemm_persistent(const TensorMap* map_a, const TensorMap* map_b,
                                                const TensorMap* map_c, const EdgeMaps* a_edges,
                                                const EdgeMaps* b_edges, int M, int N, int K, int sk_tiles,
                                                unsigned char* workspace) {
    extern __shared__ unsigned char smem_raw[];
    SharedStorage& smem = *reinterpret_cast<SharedStorage*>(
        (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    const Workspace ws{workspace};   // (the ticket counter)
    const int slices = (K + BK - 1) / BK;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        fp_tma::prefetch_map(map_a);
        fp_tma::prefetch_map(map_b);
        fp_tma::prefetch_map(map_c);
        for (int s = 0; s < STAGES; ++s) {
            fp_mbar::mbar_init(&smem.full[s], 1);
            fp_mbar::mbar_init(&smem.empty[s], CONSUMERS * WRITERS);
        }
        fp_mbar::fence_barrier_init();
    }
    // Launched as a dependent (hopper_gemm._launch_config), this block may be here while the
    // kernel before it on the stream still runs: its setup above overlapped that kernel's
    // tail; from here on it reads and writes global memory. The next kernel launches once
    // every block of this grid has passed this point (or exited): all of ours are resident
    // by then, so no stream-K cluster waits on one the next kernel's blocks keep off an SM.
    // Those blocks take SMs as ours leave and wait there in turn.
    fp_pdl::wait_for_prior_grid();
    fp_pdl::allow_next_grid();
    if (threadIdx.x == 0 && fp_tma::cluster_rank() == 0)   // the cluster's ticket (every block reads it from here)
        smem.ticket = sk_tiles > 0 ? atomicInc(ws.counter(), gridDim.x / CLUSTER - 1) : blockIdx.x / CLUSTER;
    fp_tma::cluster_sync();   // every block's barriers and the ticket exist before any multicast / remote access

    // (each role reads its ticket and builds its scheduler after setmaxnreg: values live
    // across it are spilled)
    if (wg == 0) {
        if constexpr (MOVE_REGISTERS) fp_wgmma::release_registers<PRODUCER_REGS>();
        if (threadIdx.x < 32) {   // the producer's warp: one lane issues (fp_tma::elect_one)
            const int ticket = __shfl_sync(0xffffffffu, static_cast<int>(fp_tma::load_cluster_u32(&smem.ticket, 0)), 0);
            producer(smem, map_a, map_b, a_edges, b_edges, TileScheduler(M, N, slices, sk_tiles, ticket), M, N);
        }
        __syncwarp();
    } else {
        if constexpr (MOVE_REGISTERS) fp_wgmma::claim_registers<CONSUMER_REGS>();
        const int ticket = static_cast<int>(fp_tma::load_cluster_u32(&smem.ticket, 0));
        consumer<BF16>(smem, map_c, TileScheduler(M, N, slices, sk_tiles, ticket),
                       Workspace{workspace}, wg - 1, M);
    }
    fp_tma::cluster_sync();   // no peer writes here nor arrives on our barriers any more
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_hopper_persistent_bf16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                            const __grid_constant__ TensorMap map_c, const __grid_constant__ EdgeMaps a_edges,
                            const __grid_constant__ EdgeMaps b_edges, int M, int N, int K, int sk_tiles,
                            unsigned char* workspace) {
    gemm_persistent<true>(&map_a, &map_b, &map_c, &a_edges, &b_edges, M, N, K, sk_tiles, workspace);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_hopper_persistent_f16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                           const __grid_constant__ TensorMap map_c, const __grid_constant__ EdgeMaps a_edges,
                           const __grid_constant__ EdgeMaps b_edges, int M, int N, int K, int sk_tiles,
                           unsigned char* workspace) {
    gemm_persistent<false>(&map_a, &map_b, &map_c, &a_edges, &b_edges, M, N, K, sk_tiles, workspace);
}
