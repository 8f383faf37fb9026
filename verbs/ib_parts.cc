#include "ib_parts.h"

namespace zipccl::verbs {

const char* PartMatcher::first(const MessageHeader& h, uint32_t imm, uint32_t parts) {
  if (parts < 1 || parts > uint32_t(kMaxQpsPerConn)) return "a message split over more parts than QPs";
  incoming_.push_back(Incoming{h, imm, parts, 1});
  return match();
}

const char* PartMatcher::part(uint32_t q, uint32_t imm, size_t may_come) {
  if (q < 1 || q >= uint32_t(kMaxQpsPerConn)) return "a part on a QP the connection does not have";
  early_[q].push_back(imm);
  if (const char* why = match()) return why;
  // Parts still waiting belong to messages whose first part has not come: at most one each.
  if (early_[q].size() > may_come) return "a part for no receive that can still arrive";
  return nullptr;
}

// A part on QP q belongs to the first message still waiting for one there: parts go out in
// message order on every QP.
const char* PartMatcher::match() {
  for (Incoming& in : incoming_)
    for (uint32_t q = 1; q < in.parts; ++q) {
      if ((in.seen >> q & 1) || early_[q].empty()) continue;
      if (early_[q].front() != in.imm) return "a message's parts disagree";
      early_[q].pop_front();
      in.seen |= 1u << q;
    }
  return nullptr;
}

bool PartMatcher::pop(MessageHeader* h) {
  if (incoming_.empty() || incoming_.front().seen != (1u << incoming_.front().parts) - 1) return false;
  *h = incoming_.front().h;
  incoming_.pop_front();
  return true;
}

}  // namespace zipccl::verbs
