// SPDX-License-Identifier: Apache-2.0
// Overloaded{lambdas...}: one visitor out of several lambdas, for exhaustive std::visit.
#pragma once

namespace ipmasq {

template<class... Ts>
struct Overloaded : Ts... {
	using Ts::operator()...;
};
template<class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

} // namespace ipmasq
