// Package cuda holds flowkit's CUDA kernels: CUDA C++ sources compiled to
// PTX, embedded in the binary, and Go wrappers that launch them through
// runtime/cuda (the driver and cuBLAS, loaded at run time).
//
// # Kernel families
//
// One .cu file per family, each compiled to the PTX module of the same name:
// elementwise (ReLU, GELU, SwiGLU and their gradients, Add, Mul, Scale,
// Axpy, Fill), rope (rotary position embeddings and their gradient),
// cast (float32 ↔ bfloat16), dropout, bias (BiasAdd, and BiasAct, a bias and
// a ReLU or GELU in one pass, and its gradient), reduce (ReduceSum,
// BroadcastAxis, and the column sums of BiasGrad), softmax, norm (LayerNorm,
// RMSNorm), batchnorm (BatchNorm in training mode, of NCHW images), loss (softmax cross-entropy, mean square), embedding, optim
// (SGD, momentum, Adam), conv (im2col, col2im and a transpose around
// cuBLAS's GEMMs), pool (max pooling), and feed (the runtime's iteration
// counter, loss history and batch gathering). Attention, grouped-query
// attention included, is cuBLAS strided-batched GEMMs over views of the
// packed qkv with the softmax kernels in between. Every entry point is extern "C", named for its
// operation and dtype (relu_f32, relu_bf16, …), with the activation in
// between for the fused ones (bias_act_gelu_bf16). The elementwise and the
// fused kernels take their activations from one header, activation.cuh, so
// that they compute the same values.
//
// # Semantics
//
// The wrappers mirror kernels/cpu: the same names and arguments in the same
// order, with a stream for the Pool, device pointers for slices, the dtype
// after the stream where a kernel has one instance per dtype, and explicit
// element counts where kernels/cpu takes len of a slice. Each kernel
// computes what its kernels/cpu counterpart computes (the dropout hash, the
// rule for ties in max pooling, the weight decay of the optimizers, Adam's
// bias correction, where LayerNorm and RMSNorm add eps), in float32
// arithmetic; the GPU tests compare every kernel with a float64 reference
// or with kernels/cpu. Every op runs in float32; the ops a bfloat16
// transformer or MLP needs run in bfloat16 too, as a storage type only
// (arithmetic and statistics in float32, LayerNorm's mean and rstd and
// RMSNorm's rstd float32). Convolutions, max pooling and softmax
// cross-entropy are float32 only.
//
// Differences forced by the device: ids and labels live in device memory,
// so they are not checked on the host; an out-of-range id or label gives
// NaN (and no gradient) instead of an error, never an access out of bounds.
// Dropout's mask counters and Adam's step are read from an int64 iteration
// number in device memory, so that a CUDA graph captured once replays with
// each replay's iteration. Kernels that reduce (BiasGrad, LayerNorm's and
// RMSNorm's parameter gradients, BatchNorm and its gradient, MeanSquare)
// take a workspace, whose size a …Workspace function gives, so that their
// sums run in an order fixed by the sizes (no atomics): results do not
// depend on the device or the run. BatchNorm spreads each channel over
// several blocks, and merges their statistics in the workspace.
//
// # Launch conventions
//
// Blocks are 256 threads (32×8 for column sums), and every kernel declares
// it with __launch_bounds__, so that its register use always allows the
// launch. Elementwise kernels loop grid-stride over 16-byte vectors when all
// their pointers are 16-byte aligned, then over single elements; grids are
// capped at 8 blocks per multiprocessor. Row kernels (softmax, LayerNorm,
// RMSNorm, cross-entropy gradient) give a row of up to 1024 columns to a warp,
// holding it in registers, and longer rows to a block. Sizes are passed as
// int32 where the kernel indexes in 32 bits (the wrappers check that
// products fit, and return an error wrapping ErrArg otherwise) and as int64
// for element counts of elementwise kernels. Each kernel's parameter types
// are declared once, beside its C prototype, in the wrappers' files; every
// launch checks its arguments against them, and a test checks them against
// the compiled PTX.
//
// # Regenerating the PTX
//
// The .ptx files are generated and committed: go generate ./kernels/cuda
// runs gen.sh, which needs nvcc (on Debian, apt-get install
// nvidia-cuda-toolkit, from non-free). They are PTX for compute capability
// 8.0 (nvcc -arch=compute_80), which the driver compiles for the GPU it
// finds when Load runs: one binary runs on the A100, the H100 and H200, and
// later GPUs, and the kernels use nothing newer than sm_80 (bfloat16
// conversions). A test regenerates the PTX where the same nvcc release is
// installed and requires identical bytes; another assembles it for sm_90
// with ptxas and fails on register spills.
package cuda
