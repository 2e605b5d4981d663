// SPDX-License-Identifier: Apache-2.0
// Expression builders: one per nf_tables expression kind, setting what nft sets.
#include "ip-masq-agent/netlink/expressions.h"

#include <arpa/inet.h>
#include <linux/netfilter/nf_tables.h>
#include <utility>

namespace ipmasq::netlink {

void addExpr(nftnl_rule *rule, ExprPtr expr)
{
	nftnl_rule_add_expr(rule, expr.release());
}

void addMetaLoad(nftnl_rule *rule, uint32_t key, uint32_t dreg)
{
	ExprPtr expr = newExpr("meta");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_META_KEY, key);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_META_DREG, dreg);
	addExpr(rule, std::move(expr));
}

void addCmp(nftnl_rule *rule, uint32_t op, uint32_t sreg, std::span<const uint8_t> data)
{
	ExprPtr expr = newExpr("cmp");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_CMP_SREG, sreg);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_CMP_OP, op);
	nftnl_expr_set(expr.get(), NFTNL_EXPR_CMP_DATA, data.data(), data.size());
	addExpr(rule, std::move(expr));
}

void addPayloadLoad(nftnl_rule *rule, uint32_t base, uint32_t offset, uint32_t len,
		    uint32_t dreg)
{
	ExprPtr expr = newExpr("payload");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_PAYLOAD_DREG, dreg);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_PAYLOAD_BASE, base);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_PAYLOAD_OFFSET, offset);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_PAYLOAD_LEN, len);
	addExpr(rule, std::move(expr));
}

void addFibLoad(nftnl_rule *rule, uint32_t flags, uint32_t result, uint32_t dreg)
{
	ExprPtr expr = newExpr("fib");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_FIB_DREG, dreg);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_FIB_RESULT, result);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_FIB_FLAGS, flags);
	addExpr(rule, std::move(expr));
}

void addLookup(nftnl_rule *rule, uint32_t sreg, const std::string &set, uint32_t setId,
	       bool inverted)
{
	ExprPtr expr = newExpr("lookup");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_LOOKUP_SREG, sreg);
	nftnl_expr_set_str(expr.get(), NFTNL_EXPR_LOOKUP_SET, set.c_str());
	if (setId)
		nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_LOOKUP_SET_ID, setId);
	if (inverted)
		nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
	addExpr(rule, std::move(expr));
}

void addObjectReference(nftnl_rule *rule, uint32_t type, const std::string &name)
{
	ExprPtr expr = newExpr("objref");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_OBJREF_IMM_TYPE, type);
	nftnl_expr_set_str(expr.get(), NFTNL_EXPR_OBJREF_IMM_NAME, name.c_str());
	addExpr(rule, std::move(expr));
}

void addNumgen(nftnl_rule *rule, uint32_t type, uint32_t modulus, uint32_t dreg)
{
	ExprPtr expr = newExpr("numgen");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_NG_DREG, dreg);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_NG_MODULUS, modulus);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_NG_TYPE, type);
	// nft always sends the offset, even when it is 0.
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_NG_OFFSET, 0);
	addExpr(rule, std::move(expr));
}

void addByteorder(nftnl_rule *rule, uint32_t op, uint32_t sreg, uint32_t dreg, uint32_t len,
		  uint32_t size)
{
	ExprPtr expr = newExpr("byteorder");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_BYTEORDER_SREG, sreg);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_BYTEORDER_DREG, dreg);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_BYTEORDER_OP, op);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_BYTEORDER_LEN, len);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_BYTEORDER_SIZE, size);
	addExpr(rule, std::move(expr));
}

void addImmediateData(nftnl_rule *rule, uint32_t dreg, std::span<const uint8_t> data)
{
	ExprPtr expr = newExpr("immediate");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_IMM_DREG, dreg);
	nftnl_expr_set(expr.get(), NFTNL_EXPR_IMM_DATA, data.data(), data.size());
	addExpr(rule, std::move(expr));
}

void addVerdict(nftnl_rule *rule, int32_t verdict, const std::string &chain)
{
	ExprPtr expr = newExpr("immediate");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_IMM_VERDICT, static_cast<uint32_t>(verdict));
	if (!chain.empty())
		nftnl_expr_set_str(expr.get(), NFTNL_EXPR_IMM_CHAIN, chain.c_str());
	addExpr(rule, std::move(expr));
}

bool addPortRangeRegisters(nftnl_rule *rule, uint16_t first, uint16_t last, uint32_t minReg,
			   uint32_t maxReg)
{
	// Ports travel in network byte order, two bytes each, as in the transport header.
	const auto load = [rule](uint32_t reg, uint16_t port) {
		const uint16_t be = htons(port);
		addImmediateData(rule, reg,
				 std::span(reinterpret_cast<const uint8_t *>(&be), sizeof(be)));
	};
	load(minReg, first);
	if (first == last)
		return false;
	load(maxReg, last);
	return true;
}

void addMasq(nftnl_rule *rule, uint32_t flags, uint32_t protoMinReg, uint32_t protoMaxReg)
{
	ExprPtr expr = newExpr("masq");
	// A plain "masquerade" carries no attribute at all, not even flags 0.
	if (flags)
		nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_MASQ_FLAGS, flags);
	if (protoMinReg)
		nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_MASQ_REG_PROTO_MIN, protoMinReg);
	if (protoMaxReg)
		nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_MASQ_REG_PROTO_MAX, protoMaxReg);
	addExpr(rule, std::move(expr));
}

void addSourceNat(nftnl_rule *rule, uint32_t family, const NatRegisters &registers,
		  uint32_t flags)
{
	ExprPtr expr = newExpr("nat");
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_NAT_TYPE, NFT_NAT_SNAT);
	nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_NAT_FAMILY, family);
	const std::pair<uint16_t, uint32_t> attributes[] = {
		{NFTNL_EXPR_NAT_REG_ADDR_MIN, registers.addressMin},
		{NFTNL_EXPR_NAT_REG_ADDR_MAX, registers.addressMax},
		{NFTNL_EXPR_NAT_REG_PROTO_MIN, registers.protoMin},
		{NFTNL_EXPR_NAT_REG_PROTO_MAX, registers.protoMax},
	};
	for (const auto &[attribute, reg] : attributes)
		if (reg)
			nftnl_expr_set_u32(expr.get(), attribute, reg);
	if (flags)
		nftnl_expr_set_u32(expr.get(), NFTNL_EXPR_NAT_FLAGS, flags);
	addExpr(rule, std::move(expr));
}

} // namespace ipmasq::netlink
