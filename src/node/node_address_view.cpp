// SPDX-License-Identifier: Apache-2.0
// This node's addresses as known: a read, then the announced changes, in order.
#include "ip-masq-agent/node/node_address_view.h"

#include <algorithm>

namespace ipmasq {

NodeAddressView::Key NodeAddressView::keyOf(const NodeAddress &address)
{
	if (address.address.family == Family::ipv6)
		return Key{Family::ipv6, address.ifindex, address.address.value, 0, 0};
	return Key{Family::ipv4, address.ifindex, address.address.value, address.prefixLength,
		   address.peer.value};
}

bool NodeAddressView::inAny(const Address &address, const std::vector<Prefix> &prefixes)
{
	return std::any_of(prefixes.begin(), prefixes.end(),
			   [&](const Prefix &prefix) { return prefix.contains(address); });
}

NodeAddresses NodeAddressView::addresses() const
{
	NodeAddresses out{{}, state_ == State::current, state_ == State::stale};
	out.addresses.reserve(addresses_.size());
	for (const auto &[key, address] : addresses_)
		out.addresses.push_back(address);
	return out;
}

void NodeAddressView::replace(const std::vector<NodeAddress> &addresses)
{
	addresses_.clear();
	for (const NodeAddress &address : addresses)
		addresses_.insert_or_assign(keyOf(address), address);
	state_ = State::current;
}

bool NodeAddressView::apply(const AddressChange &change, const std::vector<Prefix> &watched)
{
	if (state_ == State::unknown)
		return false;
	const Key key = keyOf(change.address);
	if (change.kind == AddressChange::Kind::removed) {
		addresses_.erase(key);
	} else if (const auto known = addresses_.find(key); known != addresses_.end()) {
		// The notification names no interface: keep the name a read gave it.
		std::string name = std::move(known->second.interface);
		known->second = change.address;
		known->second.interface = std::move(name);
	} else if (addresses_.size() < limit_) {
		addresses_.emplace(key, change.address);
	} else {
		// Past the bound a read refuses too (E2BIG): what is known stays, marked stale.
		state_ = State::stale;
	}
	return inAny(change.address.address, watched);
}

void NodeAddressView::lose()
{
	if (state_ == State::current)
		state_ = State::stale;
}

} // namespace ipmasq
