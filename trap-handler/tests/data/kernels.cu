// Small CUDA kernels of the shapes DNN inference engines launch, compiled by
// the reef-trap tests with nvcc to PTX, injected with reef-ptx-inject and
// assembled with ptxas (REEF Fig. 8: every kernel gets the preemptor).

struct Shape {
    int n, c, h, w;
};

// A dense layer: several pointer and scalar parameters.
extern "C" __global__ void dense(const float *in, const float *weight, const float *bias,
                                 float *out, int n_in, int n_out) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n_out) return;
    float acc = bias[o];
    for (int i = 0; i < n_in; ++i) acc += in[i] * weight[o * n_in + i];
    out[o] = acc > 0.f ? acc : 0.f;
}

// A reduction with shared memory and a barrier, and launch bounds (.maxntid).
__global__ void __launch_bounds__(256) reduce_sum(const float *in, float *out, Shape s) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    int i = blockIdx.x * 256 + t;
    buf[t] = i < s.n * s.c * s.h * s.w ? in[i] : 0.f;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if (t < k) buf[t] += buf[t + k];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, buf[0]);
}

// A template instantiation (mangled name) and a kernel without parameters.
template <typename T> __global__ void scale(T *x, T a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
template __global__ void scale<float>(float *, float, unsigned);
template __global__ void scale<double>(double *, double, unsigned);

__device__ unsigned ticks;
extern "C" __global__ void tick() { atomicAdd(&ticks, 1u); }
