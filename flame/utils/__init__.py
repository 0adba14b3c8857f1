"""flame.utils: helpers around training (data: index sharding over ranks)."""
