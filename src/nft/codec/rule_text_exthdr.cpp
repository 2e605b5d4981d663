// SPDX-License-Identifier: Apache-2.0
// IPv6 extension headers, TCP and IP options and SCTP chunks as nft names and prints them
// (nft's exthdr.c, tcpopt.c, ipopt.c and sctp_chunk.c, read, not copied).
#include <algorithm>

#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

#include "ip-masq-agent/nft/codec/rule_text_parts.h"

namespace ipmasq::nft::text {

namespace {

// nft's exthdr_init_raw: the header of that number whose field lies at `offset`, `bits`
// long (a present check is a boolean); without one, the header unnamed or the field.
bool findExthdrField(Node &n, uint32_t offset, uint32_t bits, uint32_t flags)
{
	n.offset = offset;
	n.bits = bits;
	n.exthdrFlags = flags;
	n.type = (flags & NFT_EXTHDR_F_PRESENT) ? Type::boolean : Type::integer;
	const auto headers = exthdrHeaders(n.key, n.headerType);
	n.header = headers.empty() ? nullptr : &headers.front();
	n.field = -1;
	for (const ExthdrHeader &header : headers)
		for (size_t i = 0; i < header.fields.size(); i++)
			if (header.fields[i].offset == offset && header.fields[i].bits == bits) {
				n.header = &header;
				n.field = int(i);
				if (!(flags & NFT_EXTHDR_F_PRESENT))
					n.type = header.fields[i].type;
				return true;
			}
	return false;
}

} // namespace

NodeId exthdrNode(Tree &tree, const Exthdr &x)
{
	Node n{.kind = Kind::exthdr, .order = ByteOrder::big, .key = x.op};
	n.headerType = x.type;
	findExthdrField(n, x.offset * 8, x.len * 8, x.flags);
	return tree.add(std::move(n));
}

bool exthdrTrim(Tree &tree, NodeId id, const Node &maskNode, int &shift)
{
	Node &n = tree.at(id);
	const int maskOffset = std::max(lowestSet(maskNode.value), 0);
	const int maskLen = firstClear(maskNode.value, maskOffset + 1);
	const uint32_t offset = n.offset + (maskNode.bits + 7) / 8 * 8 - uint32_t(maskLen);
	const bool options = n.key == NFT_EXTHDR_OP_IPV4 || n.key == NFT_EXTHDR_OP_TCPOPT;
	if ((!options && n.key != NFT_EXTHDR_OP_IPV6) || (options && n.field >= 0))
		return false;
	if (!findExthdrField(n, offset, uint32_t(maskLen - maskOffset), 0))
		return false;
	shift = maskOffset;
	return true;
}

void killExthdrDependency(PostContext &cx, const Node &n)
{
	const Base base = n.key == NFT_EXTHDR_OP_TCPOPT ? Base::transport
			  : n.key == NFT_EXTHDR_OP_IPV6 || n.key == NFT_EXTHDR_OP_IPV4 ? Base::network : Base::invalid;
	if (base != Base::invalid && dependencyExists(cx, base))
		releaseDependency(cx, base);
}

// nft's exthdr_expr_print.
std::string exthdrText(const Node &n)
{
	const bool present = n.exthdrFlags & NFT_EXTHDR_F_PRESENT;
	const char *field = n.header && n.field >= 0 ? n.header->fields[size_t(n.field)].name : nullptr;
	const std::string unknownField = unknownText("exthdr field");
	switch (n.key) {
	case NFT_EXTHDR_OP_TCPOPT:
		if (!n.header)
			return present && n.offset == 0 ? fmt::format("tcp option {}", n.headerType)
							: fmt::format("tcp option @{},{},{}", n.headerType, n.offset, n.bits);
		if (present)
			return fmt::format("tcp option {}", n.header->name);
		return fmt::format("tcp option {}{} {}", n.header->name, n.offset / 64 ? std::to_string(n.offset / 64) : "",
				   field ? field : unknownField);
	case NFT_EXTHDR_OP_IPV4:
	case NFT_EXTHDR_OP_SCTP:
		if (!n.header)
			break;
		return fmt::format("{} {}{}{}", n.key == NFT_EXTHDR_OP_IPV4 ? "ip option" : "sctp chunk", n.header->name,
				   present ? "" : " ", present ? "" : field ? field : unknownField.c_str());
	case NFT_EXTHDR_OP_IPV6:
		if (present)
			return fmt::format("exthdr {}", n.header ? n.header->name : "unknown-exthdr");
		if (!n.header || !field)
			break;
		return fmt::format("{} {}", n.header->name, field);
	default:
		break;
	}
	return unknownText("exthdr");
}

} // namespace ipmasq::nft::text
