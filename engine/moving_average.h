// The engines' rate and delay estimates: exponential moving averages.
#pragma once

namespace zipccl {

// 1/weight of the way from avg to v; the first sample (avg 0) taken whole.
inline double moved_toward(double avg, double v, double weight) { return avg == 0 ? v : avg + (v - avg) / weight; }

}  // namespace zipccl
