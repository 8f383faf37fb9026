// The two halves of the reliable-connection protocol that the service thread runs, under Emu::mu.
#pragma once

#include "state.h"
#include "wire.h"

namespace zipccl::verbs::emu {

// requester.cc: moves qp's send queue forward (sends what is due, retransmits, times out,
// flushes an ERR queue). Returns when it next needs to run, at the latest.
Clock::time_point progress_requester(Emu& e, Qp* qp, Clock::time_point now);
// An ACK, NAK or DROPPED for one of our requests.
void handle_reply(Emu& e, const Header& h, const char* payload);
// The connection to lid broke: what it carried is lost.
void peer_unreachable(Emu& e, uint16_t lid);

// responder.cc: one request arriving on conn; the reply goes back on it.
void handle_request(Emu& e, Conn* conn, const Header& h, const char* payload);

// fabric.cc: the connection for requests to lid, made on first use; null when nothing listens
// there (the request is lost).
Conn* conn_to(Emu& e, uint16_t lid);

}  // namespace zipccl::verbs::emu
