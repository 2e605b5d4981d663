// SPDX-License-Identifier: Apache-2.0
// One small builder per nf_tables expression kind, each appending what `nft` would emit.
//
// Register numbers follow nft: the 16-byte registers NFT_REG_1 / NFT_REG_2, and the
// verdict register for verdicts. Every builder sets exactly the attributes nft sets
// (also the zero-valued ones, e.g. numgen's offset), so that our rules are the same
// bytecode, byte for byte, and `nft list` decompiles them into the statements we render.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ip-masq-agent/netlink/handles.h"

namespace ipmasq::netlink {

// Appends `expr` to `rule`, which takes ownership.
void addExpr(nftnl_rule *rule, ExprPtr expr);

// meta load <key> => reg
void addMetaLoad(nftnl_rule *rule, uint32_t key, uint32_t dreg);

// cmp <op> reg, <data> (data exactly as the kernel compares it: byte order included)
void addCmp(nftnl_rule *rule, uint32_t op, uint32_t sreg, std::span<const uint8_t> data);

// payload load <len>b @ <base> header + <offset> => reg
void addPayloadLoad(nftnl_rule *rule, uint32_t base, uint32_t offset, uint32_t len,
		    uint32_t dreg);

// fib <flags> <result> => reg
void addFibLoad(nftnl_rule *rule, uint32_t flags, uint32_t result, uint32_t dreg);

// lookup reg set <name>; a non-zero id ties it to a set declared earlier in the same
// batch, 0 refers to an existing set by name only. `inverted`: "!= @set".
void addLookup(nftnl_rule *rule, uint32_t sreg, const std::string &set, uint32_t setId,
	       bool inverted = false);

// objref type <type> name <name>: "counter name \"x\"" for a named counter.
void addObjectReference(nftnl_rule *rule, uint32_t type, const std::string &name);

// numgen <type> mod <modulus> => reg
void addNumgen(nftnl_rule *rule, uint32_t type, uint32_t modulus, uint32_t dreg);

// byteorder reg = <op>(reg, size, len)
void addByteorder(nftnl_rule *rule, uint32_t op, uint32_t sreg, uint32_t dreg, uint32_t len,
		  uint32_t size);

// immediate reg <data>
void addImmediateData(nftnl_rule *rule, uint32_t dreg, std::span<const uint8_t> data);

// immediate reg 0 <verdict> [-> chain]
void addVerdict(nftnl_rule *rule, int32_t verdict, const std::string &chain = {});

// Load a transport port range into two registers, as nft does for "to :first-last";
// a single port uses `minReg` only. Returns whether `maxReg` was loaded.
bool addPortRangeRegisters(nftnl_rule *rule, uint16_t first, uint16_t last, uint32_t minReg,
			   uint32_t maxReg);

// masq [flags <flags>] [proto_min reg] [proto_max reg]; 0 leaves a register unset.
void addMasq(nftnl_rule *rule, uint32_t flags, uint32_t protoMinReg, uint32_t protoMaxReg);

// The registers of a NAT statement's target; 0 leaves one unset.
struct NatRegisters {
	uint32_t addressMin = 0;
	uint32_t addressMax = 0;
	uint32_t protoMin = 0;
	uint32_t protoMax = 0;
};

// nat snat <family> addr_min reg addr_max reg [proto_min reg proto_max reg] flags <flags>
void addSourceNat(nftnl_rule *rule, uint32_t family, const NatRegisters &registers,
		  uint32_t flags);

} // namespace ipmasq::netlink
