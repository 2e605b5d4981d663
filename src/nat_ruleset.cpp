// SPDX-License-Identifier: Apache-2.0
// Other tables' NAT as data: look-ups by name.
#include "ip-masq-agent/nat_ruleset.h"

namespace ipmasq::nat {

const char *tableFamilyName(TableFamily family)
{
	switch (family) {
	case TableFamily::ip:
		return "ip";
	case TableFamily::ip6:
		return "ip6";
	case TableFamily::inet:
		return "inet";
	}
	return "?";
}

const Chain *Table::findChain(const std::string &chainName) const
{
	for (const Chain &chain : chains)
		if (chain.name == chainName)
			return &chain;
	return nullptr;
}

const Set *Table::findSet(const std::string &setName) const
{
	for (const Set &set : sets)
		if (set.name == setName)
			return &set;
	return nullptr;
}

} // namespace ipmasq::nat
