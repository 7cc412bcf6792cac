// Which SMs of the device share a GPC, read from where the hardware places thread-block clusters.
//
//   nvcc -O2 -arch=sm_90a -o /tmp/gpc_map scripts/device/gpc_map.cu && /tmp/gpc_map [launches]
//
// A cluster never spans GPCs, so the SMs one cluster ran on share a GPC. 8-CTA clusters (the largest
// portable size) split a GPC of 16-18 SMs into two groups of 8; 16-CTA clusters (non-portable, Hopper)
// hold a whole GPC of 16 or more. The program launches both, one CTA per SM (shared memory past half
// an SM), unions the SM sets each cluster held, and prints one line per group: size 8, then size 16.
// The GEMM's cluster order by GPC (GemmKnobs.place_order, tile_schedule.placed_rank) rests on this map.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    cudaError_t err_ = (call);                                                               \
    if (err_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,                      \
                   cudaGetErrorString(err_));                                                \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

constexpr int kSmem = 200 * 1024;  // past half of an SM's 228 KB: one CTA per SM

__global__ void record_sm(int* sm_of_cta) {
  extern __shared__ char smem[];
  if (threadIdx.x == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    smem[0] = 1;  // keep the allocation
    sm_of_cta[blockIdx.x] = static_cast<int>(sm);
  }
}

struct Groups {
  std::vector<int> parent;
  explicit Groups(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void join(int a, int b) { parent[find(a)] = find(b); }
};

// Launch clusters of `size` CTAs `launches` times; join the SMs of each cluster in `groups` and mark
// the SMs seen. Returns the clusters per launch (0 when the size cannot launch).
static int place(int size, int launches, Groups& groups, std::vector<bool>& seen) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = size;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cfg.blockDim = dim3(32, 1, 1);
  cfg.dynamicSmemBytes = kSmem;
  cfg.gridDim = dim3(size, 1, 1);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, record_sm, &cfg) != cudaSuccess || clusters == 0) {
    cudaGetLastError();
    return 0;
  }
  cfg.gridDim = dim3(size * clusters, 1, 1);
  int* d_sm = nullptr;
  CHECK(cudaMalloc(&d_sm, sizeof(int) * size * clusters));
  std::vector<int> sm(size * clusters);
  for (int l = 0; l < launches; ++l) {
    CHECK(cudaLaunchKernelEx(&cfg, record_sm, d_sm));
    CHECK(cudaMemcpy(sm.data(), d_sm, sizeof(int) * sm.size(), cudaMemcpyDeviceToHost));
    for (int c = 0; c < clusters; ++c)
      for (int i = 0; i < size; ++i) {
        seen[sm[c * size + i]] = true;
        groups.join(sm[c * size + i], sm[c * size]);
      }
  }
  CHECK(cudaFree(d_sm));
  return clusters;
}

static void print_groups(int size, int clusters, Groups& groups, const std::vector<bool>& seen) {
  const int n = static_cast<int>(seen.size());
  std::printf("clusters of %d: %d resident\n", size, clusters);
  std::vector<bool> done(n, false);
  for (int s = 0; s < n; ++s) {
    if (!seen[s] || done[groups.find(s)]) continue;
    done[groups.find(s)] = true;
    std::printf("  group:");
    for (int t = 0; t < n; ++t)
      if (seen[t] && groups.find(t) == groups.find(s)) std::printf(" %d", t);
    std::printf("\n");
  }
  std::printf("  never placed:");
  for (int s = 0; s < n; ++s)
    if (!seen[s]) std::printf(" %d", s);
  std::printf("\n");
}

int main(int argc, char** argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 8;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaFuncSetAttribute(record_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaFuncSetAttribute(record_sm, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::printf("%d SMs\n", sms);
  for (int size : {8, 16}) {
    Groups groups(sms);
    std::vector<bool> seen(sms, false);
    int clusters = place(size, launches, groups, seen);
    print_groups(size, clusters, groups, seen);
  }
  return 0;
}
