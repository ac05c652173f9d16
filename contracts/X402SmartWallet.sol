// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// @title X402SmartWallet
/// @notice A minimal contract wallet with one owner key, standing in for smart-account payers
///         (Coinbase Smart Wallet, Safe, ERC-4337 accounts) in x402mw's tests: it accepts, through
///         EIP-1271, the owner's 65-byte ECDSA signature `r || s || v` of the hash itself, and runs
///         calls the owner sends.
/// @dev Real smart accounts usually wrap the hash in a domain of their own before the owner signs it
///      (so one owner's signature cannot serve two of its wallets); this one does not, which keeps
///      the tests' signing plain EIP-712 signing by the owner key.
contract X402SmartWallet {
    bytes4 private constant _ERC1271_MAGIC = 0x1626ba7e;
    uint256 private constant _HALF_ORDER = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    address public immutable owner;

    constructor(address owner_) {
        owner = owner_;
    }

    receive() external payable {}

    /// @notice EIP-1271: 0x1626ba7e when `signature` is the owner's over `hash`, else 0xffffffff.
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        if (signature.length != 65) {
            return 0xffffffff;
        }
        (bytes32 r, bytes32 s) = abi.decode(signature, (bytes32, bytes32));
        uint8 v = uint8(signature[64]);
        if (v < 27) {
            v += 27;
        }
        if (uint256(s) > _HALF_ORDER) {
            return 0xffffffff;
        }
        address signer = ecrecover(hash, v, r, s);
        return signer != address(0) && signer == owner ? _ERC1271_MAGIC : bytes4(0xffffffff);
    }

    /// @notice Calls `target` with `value` and `data` on the owner's behalf; a failed call reverts
    ///         with its own revert data.
    function execute(address target, uint256 value, bytes calldata data) external returns (bytes memory) {
        require(msg.sender == owner, "caller is not the owner");
        (bool ok, bytes memory answer) = target.call{value: value}(data);
        if (!ok) {
            assembly {
                revert(add(answer, 0x20), mload(answer))
            }
        }
        return answer;
    }
}

/// @title X402SmartWalletFactory
/// @notice Deploys `X402SmartWallet`s with CREATE2, so that a wallet's address is known from its
///         owner and salt before it exists (what an ERC-6492 signature of a counterfactual wallet
///         names as its factory call: `deploy(owner, salt)`).
contract X402SmartWalletFactory {
    event WalletDeployed(address indexed wallet, address indexed owner, bytes32 salt);

    /// @notice Deploys the wallet of `owner` and `salt` unless it exists; returns its address.
    function deploy(address owner, bytes32 salt) external returns (address wallet) {
        wallet = addressOf(owner, salt);
        if (wallet.code.length == 0) {
            new X402SmartWallet{salt: salt}(owner);
            emit WalletDeployed(wallet, owner, salt);
        }
    }

    /// @notice The address `deploy(owner, salt)` deploys to.
    function addressOf(address owner, bytes32 salt) public view returns (address) {
        bytes32 initCodeHash = keccak256(abi.encodePacked(type(X402SmartWallet).creationCode, abi.encode(owner)));
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), salt, initCodeHash)))));
    }
}

/// @title X402ERC6492Validator
/// @notice ERC-6492 signature validation without a deployment: run its creation code with
///         `abi.encode(address signer, bytes32 hash, bytes signature)` appended as an `eth_call`
///         with no `to`, and the call returns one byte, 0x01 (valid) or 0x00 (not).
///         A signature ending in the 32-byte ERC-6492 magic suffix is
///         `abi.encode(address factory, bytes factoryCalldata, bytes innerSignature)` + suffix: when
///         the signer has no code yet, the factory call runs first (inside the simulated call only),
///         and the inner signature is then checked. A signer with code is checked with EIP-1271; a
///         signer without code with ECDSA over the 65-byte `r || s || v`.
///         Refused (0x00): a failing or reverting factory, a factory that leaves the signer without
///         code (deployed elsewhere), an `isValidSignature` that reverts, runs out of gas or answers
///         anything but 0x1626ba7e, and a key signature that does not recover to the signer.
///         A wrapped signature whose wrapper cannot be ABI-decoded makes the call revert.
contract X402ERC6492Validator {
    bytes32 private constant _ERC6492_SUFFIX = 0x6492649264926492649264926492649264926492649264926492649264926492;
    bytes4 private constant _ERC1271_MAGIC = 0x1626ba7e;

    constructor(address signer, bytes32 hash, bytes memory signature) {
        bool valid = _isValid(signer, hash, signature);
        assembly {
            mstore(0, valid)
            return(31, 1)
        }
    }

    function _isValid(address signer, bytes32 hash, bytes memory signature) private returns (bool) {
        if (_isWrapped(signature)) {
            assembly {
                mstore(signature, sub(mload(signature), 32)) // drop the suffix
            }
            (address factory, bytes memory factoryCalldata, bytes memory inner) =
                abi.decode(signature, (address, bytes, bytes));
            if (signer.code.length == 0) {
                (bool deployed,) = factory.call(factoryCalldata);
                if (!deployed || signer.code.length == 0) {
                    return false;
                }
            }
            signature = inner;
        }
        if (signer.code.length > 0) {
            (bool ok, bytes memory answer) =
                signer.staticcall(abi.encodeWithSelector(_ERC1271_MAGIC, hash, signature));
            return ok && answer.length >= 32 && bytes4(bytes32(answer)) == _ERC1271_MAGIC;
        }
        if (signature.length != 65) {
            return false;
        }
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly {
            r := mload(add(signature, 0x20))
            s := mload(add(signature, 0x40))
            v := byte(0, mload(add(signature, 0x60)))
        }
        if (v < 27) {
            v += 27;
        }
        address recovered = ecrecover(hash, v, r, s);
        return recovered != address(0) && recovered == signer;
    }

    function _isWrapped(bytes memory signature) private pure returns (bool) {
        if (signature.length < 32) {
            return false;
        }
        bytes32 tail;
        assembly {
            tail := mload(add(signature, mload(signature)))
        }
        return tail == _ERC6492_SUFFIX;
    }
}
