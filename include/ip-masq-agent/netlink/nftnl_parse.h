// SPDX-License-Identifier: Apache-2.0
// Reading what libnftnl parsed from the kernel: nft's user data TLVs (comments, a set's
// key byte order), strings the kernel may not send, parse results as Status, and the
// ruleset generation.
#pragma once

#include <cstdint>
#include <string>

#include <libnftnl/udata.h>

#include "ip-masq-agent/base/error.h"

namespace ipmasq::netlink {

class Socket; // socket.h

// The user data attribute of `type` (nft's TLVs, NFTNL_UDATA_*), or nullptr.
const nftnl_udata *userdataAttribute(const void *data, uint32_t len, uint8_t type);
// The comment an object carries in its user data (as nft writes it: a TLV of type
// `commentType`, NFTNL_UDATA_*_COMMENT), or "" without one: the reverse of the encoding.
std::string userdataComment(const void *data, uint32_t len, uint8_t commentType);
// A 32-bit value nft keeps in user data (a set's key byte order), or 0 without one.
uint32_t userdataU32(const void *data, uint32_t len, uint8_t type);

// A string libnftnl parsed from the kernel, or "" where it sent none.
std::string stringOf(const char *value);

// A reply handler's status for libnftnl's parsers, which return < 0 on a malformed message.
Status parsed(int ret, const char *what);

// The ruleset's generation, which every commit advances (NFT_MSG_GETGEN).
Result<uint32_t> rulesetGeneration(Socket &socket);

} // namespace ipmasq::netlink
