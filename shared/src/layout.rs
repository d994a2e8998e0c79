//! Every Redis key name pirq uses, in one place.
