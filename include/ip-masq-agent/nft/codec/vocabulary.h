// SPDX-License-Identifier: Apache-2.0
// nft's vocabulary, as nft 1.0.6 knows it: its datatypes (how a value prints, its byte order
// and width), the meta, ct, rt, socket and xfrm keys, and the protocol headers whose fields
// a payload load names. The decoder takes the widths a load writes from here, the rule text
// the names and formats; nothing else spells them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace ipmasq::nft {

// An integer as nft holds one (at most 128 bits here).
__extension__ typedef unsigned __int128 Wide;

enum class ByteOrder : uint8_t { invalid, host, big }; // nft's enum byteorder, as it keeps it in user data

// nft's datatypes, numbered as nft numbers them in the kernel (a set's key type), and a
// raw payload's hexadecimal integer.
enum class Type : uint8_t {
	invalid, verdict, nfproto, bitmask, integer, string, lladdr, ipaddr, ip6addr, etheraddr,
	ethertype, arpop, inetProtocol, inetService, icmpType, tcpFlag, dccpPkttype, mhType, time,
	mark, ifindex, arphrd, realm, classid, uid, gid, ctState, ctDir, ctStatus, icmp6Type,
	ctLabel, pkttype, icmpCode, icmpv6Code, icmpxCode, devgroup, dscp, ecn, fibAddr, boolean,
	ctEvent, ifname, igmpType, date, hour, day, cgroupv2, xinteger
};
inline constexpr uint32_t kTypeBits = 6; // a concatenation's type: 6 bits per part

struct TypeInfo {
	const char *name;
	Type base; // the basetype that decides comparisons: integer, bitmask, string...
	ByteOrder order;
	uint16_t bits; // 0: as long as the value
	bool prefix; // values print as prefixes in sets and matches (DTYPE_F_PREFIX)
};
const TypeInfo &typeInfo(Type type);
// The type a kernel id names (a set's key or data type); nullopt for an unknown one.
std::optional<Type> typeOfId(uint32_t id);

// How one value of `type` (an integer in host terms) prints, `bits` wide. `numeric`: as
// a number, where nft prints ranges numerically.
std::string integerText(Type type, Wide value, uint32_t bits, bool numeric = false);
// Its bytes as an integer, read in `order`.
Wide integerOf(std::span<const uint8_t> bytes, ByteOrder order);

// A key of a load or statement: nft's name, its datatype and width, and the bytes the
// kernel writes to a register (which may differ from nft's width: nftrace is 1 bit to nft,
// a byte to the kernel).
struct Key {
	const char *name; // nullptr: not a key nft 1.0.6 knows
	Type type;
	ByteOrder order;
	uint16_t bits;
	uint16_t kernelLen;
};
Key metaKey(uint32_t key);
bool metaUnqualified(uint32_t key); // iifname, oif...: printed without "meta"
Key ctKey(uint32_t key, bool ipv4Table);
Key rtKey(uint32_t key);
Key socketKey(uint32_t key);
Key xfrmKey(uint32_t key);
uint32_t fibLength(uint32_t result);

// ---- Protocol headers ----

enum class Base : uint8_t { invalid, link, network, transport, inner }; // nft's proto_bases

struct Field {
	const char *name;
	Type type;
	uint16_t offset, bits;
	uint8_t icmpDependency; // 0: any; else the ICMP type the field needs (nft's icmp_dep)
};

struct Protocol;
struct ProtocolLink {
	uint32_t number;
	const Protocol *protocol;
};

struct Protocol {
	const char *name;
	Base base;
	uint8_t protocolKey; // the field that names the upper protocol (0: none)
	uint16_t length; // bits, for stacked link-layer headers
	std::span<const Field> fields; // fields[0]: a meta template, or unnamed
	std::span<const ProtocolLink> upper;

	const Protocol *above(uint32_t number) const;
	// Field i loads the upper protocol's number.
	bool isProtocolKey(size_t i) const;
};

namespace protocols {
extern const Protocol inet, ip, ip6, icmp, icmp6, igmp, tcp, udp, udplite, sctp, dccp, ah, esp, comp, th,
	ether, vlan, arp, inetService;
}

// An IPv6 extension header, a TCP or IP option or an SCTP chunk: its name, its number, the
// fields nft names in it (offsets from its start).
struct ExthdrHeader {
	const char *name;
	uint8_t type;
	std::span<const Field> fields;
};
// Those of kind `op` (NFT_EXTHDR_OP_*) numbered `type`, in the order nft tries them (the
// IPv6 routing header's variants: rt, srh, rt0), or none.
std::span<const ExthdrHeader> exthdrHeaders(uint32_t op, uint8_t type);

// What nft calls the ICMP type a field depends on (nft's icmp_dep_to_type).
uint8_t icmpTypeOf(uint8_t dependency);

} // namespace ipmasq::nft
