// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

import {X402SmartWallet} from "./X402SmartWallet.sol";

/// @notice Contract wallets and a factory that misbehave, for the tests of bad smart-account input.

/// @notice A wallet whose `isValidSignature` always reverts.
contract X402RevertingWallet {
    function isValidSignature(bytes32, bytes calldata) external pure returns (bytes4) {
        revert("isValidSignature refused");
    }
}

/// @notice A wallet whose `isValidSignature` burns all the gas it is given.
contract X402GasBurningWallet {
    uint256 private _sink;

    function isValidSignature(bytes32, bytes calldata) external view returns (bytes4) {
        uint256 spin = _sink;
        while (gasleft() > 0) {
            spin = uint256(keccak256(abi.encode(spin)));
        }
        return bytes4(bytes32(spin));
    }
}

/// @notice A factory whose calls misbehave: `fail` reverts, `deploy` deploys the owner's wallet at
///         another address than the one `X402SmartWalletFactory.addressOf(owner, salt)` names
///         (another salt), and `deployNothing` succeeds without deploying anything.
contract X402BadWalletFactory {
    function fail(address, bytes32) external pure returns (address) {
        revert("factory refused");
    }

    function deploy(address owner, bytes32 salt) external returns (address) {
        return address(new X402SmartWallet{salt: ~salt}(owner));
    }

    function deployNothing(address, bytes32) external pure returns (address) {
        return address(0);
    }
}
