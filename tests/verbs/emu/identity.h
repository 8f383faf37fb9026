// Where an emulated port lives on the emulated fabric. Each port (device, port number) of a
// process owns a 16-bit routing id, its LID, and listens on the abstract unix socket named after
// it; binding that name is what makes the LID unique among the live processes of a host (network
// namespace). GIDs carry the LID too, so a peer routes by dlid, or by dgid when the GRH is used.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace zipccl::verbs::emu {

// This process's random 48-bit node id (never 0), fixed at first use. It is part of the node
// GUID, the port GUIDs and the IB and link-local GIDs, so a stale address of a dead process whose
// LID was since taken by another is told apart where the GID carries it.
uint64_t node_id();

// Binds and listens on the socket of the first free LID in 1..0xBFFF (unicast), probing from
// one derived from the pid. Returns the listening fd (non-blocking) and the LID, or -1 with the
// reason in *error.
int bind_lid_socket(uint16_t* lid, std::string* error);

// A non-blocking stream connection to the port that owns lid, or -1 (no such live port).
int connect_lid(uint16_t lid);

// GUID of a port: node id in the high 48 bits, its LID in the low 16.
uint64_t port_guid(uint16_t lid);

// fe80::/64 + port GUID: an IB port's GID 0, and a RoCE port's link-local GIDs.
ibv_gid link_local_gid(uint16_t lid);
// ::ffff:10.<lid high>.<lid low>.1: a RoCE port's IPv4-mapped GIDs.
ibv_gid ipv4_mapped_gid(uint16_t lid);

// The destination a GID names: its LID, and the owner's node id when the GID carries it (0 for
// an IPv4-mapped GID). False for GIDs that no emulated port has.
struct Route {
  uint16_t lid = 0;
  uint64_t node = 0;
};
bool route_from_gid(const ibv_gid& gid, Route* route);

}  // namespace zipccl::verbs::emu
