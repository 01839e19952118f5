#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
// streams S: buffer split into S equal parts, read concurrently (one 32B vector from each per step).
// prefetch distance PF bytes ahead in each stream (0 = none).
__attribute__((target("avx2,fma"))) float Read(const float* p, size_t n, int S, int PF, int unroll) {
  __m256 a0=_mm256_setzero_ps(),a1=a0,a2=a0,a3=a0;
  size_t per = n / S / 32 * 32;
  const float* base[8]; for(int s=0;s<S;++s) base[s]=p+s*per;
  for (size_t i=0;i<per;i+=32) {   // 128 B per stream per step
    for (int s=0;s<S;++s) {
      const float* q=base[s]+i;
      if (PF) _mm_prefetch((const char*)q+PF, _MM_HINT_T0);
      a0=_mm256_add_ps(a0,_mm256_load_ps(q));
      a1=_mm256_add_ps(a1,_mm256_load_ps(q+8));
      a2=_mm256_add_ps(a2,_mm256_load_ps(q+16));
      a3=_mm256_add_ps(a3,_mm256_load_ps(q+24));
    }
  }
  __m256 s=_mm256_add_ps(_mm256_add_ps(a0,a1),_mm256_add_ps(a2,a3));
  float o[8]; _mm256_storeu_ps(o,s); return o[0]+o[7];
}
int main(){
  size_t bytes=256u<<20; size_t n=bytes/4;
  float* p=(float*)aligned_alloc(64,bytes); for(size_t i=0;i<n;++i)p[i]=1;
  volatile float sink=0;
  int Ss[]={1,2,4,8}; int PFs[]={0,256,512,1024,2048,4096};
  for(int round=0;round<3;++round)
  for(int S:Ss) for(int PF:PFs){
    double best=0;
    for(int r=0;r<2;++r){auto t0=std::chrono::steady_clock::now(); sink+=Read(p,n,S,PF,1);
      double t=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count(); best=std::max(best,bytes/t*1e-9);}
    printf("round %d S=%d PF=%4d  %.1f GB/s\n",round,S,PF,best);
  }
}
